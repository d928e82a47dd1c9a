//! Connections and the threads that own them.
//!
//! Every SQLite call runs on a thread of this crate, never on the async executor: one
//! writer thread owns the only read-write connection (so writes of one process never wait
//! for each other inside SQLite), and `readers` threads share a queue of read jobs, each on
//! a read-only connection. A job is a closure sent over a channel; its result comes back on
//! a oneshot channel. When the last handle to the pool is dropped the channels close, the
//! threads end and the connections close (the last one checkpoints the WAL).
//!
//! One exception to "never on the executor": a lone write may run on the caller's thread
//! ([`Pool::write_inline`]) when the writer is idle — nothing queued for it and its
//! connection free — and then only if SQLite grants the write lock at once (no busy wait).
//! It saves the two thread hand-offs, which cost more than the insert itself.
//!
//! Opening checks the file before SQLite may write anything: an existing non-empty file
//! must carry a valid SQLite header and its schema must read back, otherwise the open
//! fails and the file is left byte for byte as it was. Only then are WAL and the schema
//! set up, in one `BEGIN IMMEDIATE` so that several processes opening one file at once
//! migrate it exactly once.

use std::fs::File;
use std::io::Read;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use outboxkit_core::{Error, ErrorKind, Timestamp};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::config::SqliteConfig;
use crate::error::{retry_busy, Result, SqliteError};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// What the writer thread runs: a job on the connection, or a transaction body it may
/// commit together with the bodies queued behind it.
enum WriterJob {
    Conn(Job),
    Tx(Box<dyn TxWork>),
}

/// The most transaction bodies one group commit takes.
const GROUP_MAX: usize = 64;

/// A transaction body sent to the writer thread and the caller waiting for its result.
trait TxWork: Send {
    /// Run the body in `tx` and keep its result: `Ok(true)` it succeeded, `Ok(false)` it
    /// failed (the transaction is to be rolled back), `Err` busy (it is retried).
    fn run(&mut self, tx: &Transaction<'_>) -> Result<bool>;
    /// Hand the kept result to the caller (after the commit).
    fn finish(self: Box<Self>);
    /// Hand `error` to the caller instead: nothing of it was committed.
    fn fail(self: Box<Self>, error: SqliteError);
    /// Run in a transaction of its own and hand the result to the caller.
    fn alone(self: Box<Self>, conn: &mut Connection, busy: Duration);
}

struct Work<T, F> {
    f: F,
    out: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> TxWork for Work<T, F>
where
    T: Send,
    F: FnMut(&Transaction<'_>) -> Result<T> + Send,
{
    fn run(&mut self, tx: &Transaction<'_>) -> Result<bool> {
        self.out = None;
        let f = &mut self.f;
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(tx))) {
            Ok(Ok(v)) => {
                self.out = Some(Ok(v));
                Ok(true)
            }
            Ok(Err(e)) if e.is_busy() => Err(e),
            Ok(Err(e)) => {
                self.out = Some(Err(e));
                Ok(false)
            }
            // A panic: no result, so the caller's receiver sees the sender dropped.
            Err(_) => Ok(false),
        }
    }

    fn finish(self: Box<Self>) {
        if let Some(out) = self.out {
            let _ = self.reply.send(out);
        }
    }

    fn fail(self: Box<Self>, error: SqliteError) {
        let _ = self.reply.send(Err(error));
    }

    fn alone(self: Box<Self>, conn: &mut Connection, busy: Duration) {
        let Work { mut f, reply, .. } = *self;
        let out = std::panic::catch_unwind(AssertUnwindSafe(|| immediate(conn, busy, |tx| f(tx))));
        if let Ok(out) = out {
            let _ = reply.send(out);
        }
    }
}

const STATEMENT_CACHE: usize = 64;

/// The page cache of the writer and of each reader, in KiB (`PRAGMA cache_size` takes a
/// negative number for KiB). A cap, not an allocation: SQLite grows it as pages are read.
const WRITER_CACHE_KIB: u32 = 64 * 1024;
const READER_CACHE_KIB: u32 = 16 * 1024;

/// The writer and the readers of one store handle.
#[derive(Debug)]
pub(crate) struct Pool {
    writer: mpsc::Sender<WriterJob>,
    /// The writer connection: its thread locks it for each job, [`Pool::write_inline`]
    /// only when free.
    writer_conn: Arc<Mutex<Connection>>,
    /// Jobs sent to the writer thread and not finished yet.
    queued: Arc<AtomicUsize>,
    busy_timeout: Duration,
    readers: Option<mpsc::Sender<Job>>,
    /// Rollbacks on the writer connection, counted by its rollback hook (see `groups`).
    rollbacks: Arc<std::sync::atomic::AtomicU64>,
}

impl Pool {
    /// Check the file, open the connections, set up WAL and the schema, start the threads.
    /// Blocking: call it off the async executor.
    pub(crate) fn open(config: &SqliteConfig, now: Timestamp) -> Result<Pool> {
        let memory = config.is_memory();
        if !memory {
            check_header(&config.path)?;
        }
        let mut writer = open_connection(config, false).map_err(|e| match e {
            SqliteError::Driver(d)
                if matches!(
                    d.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::PermissionDenied)
                ) =>
            {
                SqliteError::CannotOpen(Box::new(d))
            }
            other => other,
        })?;
        // Read the schema before anything may write: a corrupt file fails here, untouched.
        retry_busy(config.busy_timeout, || {
            writer.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))?;
            Ok(())
        })?;
        if !memory {
            // A larger WAL between automatic checkpoints: pages changed again and again by
            // claims and completions are written back to the database file once per
            // checkpoint instead of once per 1000 pages.
            writer.execute_batch("PRAGMA wal_autocheckpoint = 4000")?;
            let mode: String = retry_busy(config.busy_timeout, || {
                Ok(writer.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?)
            })?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(
                    journal_mode = %mode,
                    "sqlite could not switch the database to WAL; readers will block writers"
                );
            }
        }
        crate::schema::migrate(&mut writer, config.busy_timeout, now)?;
        let rollbacks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = rollbacks.clone();
        writer.rollback_hook(Some(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        }))?;

        let writer_conn = Arc::new(Mutex::new(writer));
        let queued = Arc::new(AtomicUsize::new(0));
        let writer_tx = spawn_writer(writer_conn.clone(), queued.clone(), config.busy_timeout)?;
        let readers = if memory || config.readers == 0 {
            None
        } else {
            let (tx, rx) = mpsc::channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..config.readers {
                let conn = open_connection(config, true)?;
                spawn_shared(format!("outbox-sqlite-reader-{i}"), conn, rx.clone())?;
            }
            Some(tx)
        };
        Ok(Pool {
            writer: writer_tx,
            writer_conn,
            queued,
            busy_timeout: config.busy_timeout,
            readers,
            rollbacks,
        })
    }

    /// The writer connection's rollback count (bumped by its rollback hook).
    pub(crate) fn rollbacks(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.rollbacks.clone()
    }

    /// Run `f` on the writer connection.
    pub(crate) async fn write<T, F>(&self, f: F) -> outboxkit_core::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.send_writer(WriterJob::Conn(job))?;
        outcome(rx).await
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction on the writer thread, retried while busy.
    /// The thread may commit it in one transaction with the bodies queued behind it (if one
    /// fails, each runs again alone), so `f` may run more than once and must not assume it
    /// owns the transaction; its result reaches the caller only once its writes are
    /// committed.
    pub(crate) async fn write_tx<T, F>(&self, f: F) -> outboxkit_core::Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        self.send_writer(WriterJob::Tx(Box::new(Work {
            f,
            out: None,
            reply,
        })))?;
        outcome(rx).await
    }

    /// Queue a job for the writer thread. Counted up before the send (in the caller's poll,
    /// so a cancelled call cannot skip it) and down by the thread after the job.
    fn send_writer(&self, job: WriterJob) -> outboxkit_core::Result<()> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.writer.send(job).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(stopped());
        }
        Ok(())
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction on the writer connection on the caller's
    /// thread, if the writer is idle (nothing queued, the connection free) and SQLite grants
    /// the write lock without waiting; `None` otherwise (nothing ran: hand the work to the
    /// writer thread with [`Pool::write`]). `f` must be short: it runs on the caller's
    /// thread, which may be an async executor's.
    pub(crate) fn write_inline<T>(
        &self,
        f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Option<Result<T>> {
        if self.queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        let mut conn: MutexGuard<'_, Connection> = match self.writer_conn.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // No busy wait here: another process's write lock sends the work to the writer
        // thread, whose busy handling waits for it off the executor.
        if let Err(e) = conn.busy_timeout(Duration::ZERO) {
            return Some(Err(e.into()));
        }
        // One try: `immediate` with no time to retry in.
        let out = immediate(&mut conn, Duration::ZERO, f);
        if let Err(e) = conn.busy_timeout(self.busy_timeout) {
            return Some(Err(e.into()));
        }
        match out {
            // Nothing was committed (a failed commit rolls back as the transaction drops).
            Err(e) if e.is_busy() => None,
            other => Some(other),
        }
    }

    /// Run `f` on a reader connection (the writer when there are no readers).
    pub(crate) async fn read<T, F>(&self, f: F) -> outboxkit_core::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        match &self.readers {
            Some(readers) => run(readers, f).await,
            None => self.write(f).await,
        }
    }
}

async fn run<T, F>(lane: &mpsc::Sender<Job>, f: F) -> outboxkit_core::Result<T>
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move |conn| {
        let _ = tx.send(f(conn));
    });
    lane.send(job).map_err(|_| stopped())?;
    outcome(rx).await
}

/// The result a job sent back.
async fn outcome<T>(rx: oneshot::Receiver<Result<T>>) -> outboxkit_core::Result<T> {
    match rx.await {
        Ok(r) => r.map_err(Error::from),
        // The job panicked (the thread caught it and goes on) or the thread is gone.
        Err(_) => Err(Error::new(
            ErrorKind::Unexpected,
            "the sqlite connection thread failed while running the statement",
        )),
    }
}

fn stopped() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "the sqlite connection thread has stopped",
    )
}

/// The writer thread: each job on the shared writer connection, counted down when done.
/// Transaction bodies queued behind each other (up to [`GROUP_MAX`]) share one transaction
/// and one commit (group commit).
fn spawn_writer(
    conn: Arc<Mutex<Connection>>,
    queued: Arc<AtomicUsize>,
    busy: Duration,
) -> Result<mpsc::Sender<WriterJob>> {
    let (tx, rx) = mpsc::channel::<WriterJob>();
    std::thread::Builder::new()
        .name("outbox-sqlite-writer".into())
        .spawn(move || writer_loop(&conn, &queued, busy, &rx))?;
    Ok(tx)
}

/// The writer thread's body: until every sender is gone. Never inlined: the bench counts
/// the writer thread's instructions inside it by name (`sqlite-counts`, callgrind
/// `--toggle-collect`).
#[inline(never)]
fn writer_loop(
    conn: &Mutex<Connection>,
    queued: &AtomicUsize,
    busy: Duration,
    rx: &mpsc::Receiver<WriterJob>,
) {
    let mut next: Option<WriterJob> = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
        };
        let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
        let done = match job {
            WriterJob::Conn(job) => {
                // As in `spawn_shared`: a panicking job fails only its caller.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
                1
            }
            WriterJob::Tx(first) => {
                let mut group = vec![first];
                while group.len() < GROUP_MAX {
                    match rx.try_recv() {
                        Ok(WriterJob::Tx(w)) => group.push(w),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let n = group.len();
                run_group(&mut conn, busy, group);
                n
            }
        };
        drop(conn);
        queued.fetch_sub(done, Ordering::AcqRel);
    }
}

/// Run `group` in one `BEGIN IMMEDIATE` transaction and hand each caller its result after
/// the commit. If a body fails, or the commit fails for any reason but a lock held past the
/// busy timeout, the transaction is rolled back and every body runs again in a transaction
/// of its own, so each caller gets its own outcome. (No savepoint per body: inside one,
/// SQLite copies every page a body first changes to the statement journal, which showed in
/// `perf`; a failed body is rare enough to pay for the rerun.)
fn run_group(conn: &mut Connection, busy: Duration, mut group: Vec<Box<dyn TxWork>>) {
    if group.len() == 1 {
        if let Some(w) = group.pop() {
            w.alone(conn, busy);
        }
        return;
    }
    let committed = retry_busy(busy, || {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for w in group.iter_mut() {
            if !w.run(&tx)? {
                // Not busy: rolled back below, then every body alone.
                return Err(SqliteError::Corrupt("a body of the group failed"));
            }
        }
        tx.commit()?;
        Ok(())
    });
    match committed {
        Ok(()) => group.into_iter().for_each(|w| w.finish()),
        Err(e) if e.is_busy() => group.into_iter().for_each(|w| w.fail(busy_error())),
        Err(_) => group.into_iter().for_each(|w| w.alone(conn, busy)),
    }
}

/// The error of a lock held past the busy timeout.
fn busy_error() -> SqliteError {
    SqliteError::Driver(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
        Some("the database stayed locked past the busy timeout".into()),
    ))
}

fn spawn_shared(
    name: String,
    mut conn: Connection,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
) -> Result<()> {
    std::thread::Builder::new().name(name).spawn(move || loop {
        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { break };
        // A panicking job drops its result sender (the caller sees an error); an open
        // transaction rolls back as it unwinds. The connection stays usable.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
    })?;
    Ok(())
}

/// Open one connection with the store's settings.
fn open_connection(config: &SqliteConfig, read_only: bool) -> Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(&config.path, flags)?;
    if !read_only {
        // One plan per statement, whatever its parameters are bound to. Without it SQLite
        // (3.54) plans some statements with the values bound at the time (a `LIMIT :n`, a
        // parameter it compares with a partial index's predicate) and prepares them again
        // whenever such a parameter is bound anew — on every run: the claim's discard,
        // group and candidates statements were parsed and planned again in every claim
        // (callgrind: `sqlite3Reprepare`, ≈ 350k instructions each, 12k per delivered
        // message). The writer's statements spell their partial indexes' predicates with
        // literals, so their plans do not depend on a bound value.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    }
    conn.busy_timeout(config.busy_timeout)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let cache = if read_only {
        READER_CACHE_KIB
    } else {
        WRITER_CACHE_KIB
    };
    conn.execute_batch(&format!(
        "PRAGMA foreign_keys = ON; PRAGMA synchronous = {}; PRAGMA cache_size = -{cache}; \
         PRAGMA temp_store = MEMORY;",
        config.synchronous.pragma()
    ))?;
    Ok(conn)
}

/// Refuse an existing file that is not a SQLite database, reading only its first 100
/// bytes (the database header). A missing or empty file is a new database.
fn check_header(path: &Path) -> Result<()> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(SqliteError::CannotOpen(Box::new(e)))
        }
        Err(e) => return Err(e.into()),
    };
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(SqliteError::NotADatabase);
    }
    if meta.len() == 0 {
        return Ok(());
    }
    let mut h = [0u8; 100];
    if file.read_exact(&mut h).is_err() {
        return Err(SqliteError::NotADatabase);
    }
    let page_size = u32::from(u16::from_be_bytes([h[16], h[17]]));
    let page_size_ok =
        page_size == 1 || (512..=32768).contains(&page_size) && page_size.is_power_of_two();
    let ok = &h[..16] == b"SQLite format 3\0"
        && page_size_ok
        && (1..=2).contains(&h[18])
        && (1..=2).contains(&h[19])
        && h[21] == 64
        && h[22] == 32
        && h[23] == 32;
    if ok {
        Ok(())
    } else {
        Err(SqliteError::NotADatabase)
    }
}

/// Run `f` in a `BEGIN IMMEDIATE` transaction (retried while busy) and commit.
pub(crate) fn immediate<T>(
    conn: &mut Connection,
    timeout: Duration,
    mut f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<T>,
) -> Result<T> {
    retry_busy(timeout, || {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    })
}

/// Run `f` in a read transaction (one consistent snapshot), retried while busy.
pub(crate) fn snapshot<T>(
    conn: &mut Connection,
    timeout: Duration,
    mut f: impl FnMut(&rusqlite::Transaction<'_>) -> Result<T>,
) -> Result<T> {
    retry_busy(timeout, || {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let out = f(&tx)?;
        tx.finish()?;
        Ok(out)
    })
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
