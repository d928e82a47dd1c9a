//! Connections and the threads that own them.
//!
//! Every SQLite call runs on a thread of this crate, never on the async executor: one
//! writer thread owns the only read-write connection (so writes of one process never wait
//! for each other inside SQLite), and `readers` threads share a queue of read jobs, each on
//! a read-only connection. A job is a closure sent over a channel; its result comes back on
//! a oneshot channel. When the last handle to the pool is dropped the channels close, the
//! threads end and the connections close (the last one checkpoints the WAL).
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
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use outboxkit_core::{Error, ErrorKind, Stopwatch, Timestamp};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tokio::sync::oneshot;

use crate::config::SqliteConfig;
use crate::error::{Result, SqliteError};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// The schema versions this crate knows, oldest first.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_hold.sql")),
    (3, include_str!("../migrations/0003_ledger.sql")),
    (5, include_str!("../migrations/0005_tokens.sql")),
];

/// The version of every migration, oldest first.
pub(crate) const MIGRATION_VERSIONS: &[i64] = &[1, 2, 3, 5];

const _: () = {
    // MIGRATION_VERSIONS lists exactly the versions of MIGRATIONS.
    assert!(MIGRATION_VERSIONS.len() == MIGRATIONS.len());
    let mut i = 0;
    while i < MIGRATIONS.len() {
        assert!(MIGRATION_VERSIONS[i] == MIGRATIONS[i].0);
        i += 1;
    }
};

/// The newest schema version (the last migration's).
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

const STATEMENT_CACHE: usize = 64;

/// The page cache of the writer and of each reader, in KiB (`PRAGMA cache_size` takes a
/// negative number for KiB). A cap, not an allocation: SQLite grows it as pages are read.
const WRITER_CACHE_KIB: u32 = 64 * 1024;
const READER_CACHE_KIB: u32 = 16 * 1024;

/// The writer and the readers of one store handle.
#[derive(Debug)]
pub(crate) struct Pool {
    writer: mpsc::Sender<Job>,
    readers: Option<mpsc::Sender<Job>>,
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
        migrate(&mut writer, config.busy_timeout, now)?;

        let writer_tx = spawn("outbox-sqlite-writer".into(), writer)?;
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
            readers,
        })
    }

    /// Run `f` on the writer connection.
    pub(crate) async fn write<T, F>(&self, f: F) -> outboxkit_core::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        run(&self.writer, f).await
    }

    /// Run `f` on a reader connection (the writer when there are no readers).
    pub(crate) async fn read<T, F>(&self, f: F) -> outboxkit_core::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        run(self.readers.as_ref().unwrap_or(&self.writer), f).await
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

fn spawn(name: String, conn: Connection) -> Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    spawn_shared(name, conn, Arc::new(Mutex::new(rx)))?;
    Ok(tx)
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

/// Bring the schema to [`SCHEMA_VERSION`] in one immediate transaction.
fn migrate(conn: &mut Connection, busy_timeout: Duration, now: Timestamp) -> Result<()> {
    retry_busy(busy_timeout, || {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS outbox_schema_version (\
                 version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )?;
        let current: i64 = tx.query_row(
            "SELECT coalesce(max(version), 0) FROM outbox_schema_version",
            [],
            |r| r.get(0),
        )?;
        if current > SCHEMA_VERSION {
            return Err(SqliteError::SchemaTooNew {
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        // Every known migration not recorded yet, in order (not only those above the
        // newest recorded one), so a migration numbered below one already applied still
        // runs.
        let applied: Vec<i64> = tx
            .prepare("SELECT version FROM outbox_schema_version")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| !applied.contains(v)) {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO outbox_schema_version (version, applied_at) VALUES (?1, ?2)",
                (version, now.as_unix_millis()),
            )?;
            tracing::info!(version, "applied the outbox sqlite schema migration");
        }
        tx.commit()?;
        Ok(())
    })
}

/// Run `f` again while SQLite reports the database busy and the busy timeout has not
/// passed. SQLite's own busy handler already waits for most locks; this covers the cases it
/// does not (a WAL snapshot or recovery in progress), so a busy error means the timeout
/// really passed.
pub(crate) fn retry_busy<T>(timeout: Duration, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let watch = Stopwatch::start();
    let mut pause = Duration::from_millis(1);
    loop {
        match f() {
            Err(e) if e.is_busy() && watch.elapsed() + pause < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
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
mod tests {
    use super::*;

    #[test]
    fn headers_are_checked_before_opening() {
        let dir = std::env::temp_dir().join(format!("outbox-sqlite-header-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.db");
        assert!(
            check_header(&path).is_ok(),
            "a missing file is a new database"
        );
        std::fs::write(&path, b"").unwrap();
        assert!(
            check_header(&path).is_ok(),
            "an empty file is a new database"
        );
        std::fs::write(&path, b"hello").unwrap();
        assert!(matches!(
            check_header(&path),
            Err(SqliteError::NotADatabase)
        ));
        let mut h = b"SQLite format 3\0".to_vec();
        h.extend_from_slice(&[0x10, 0x00, 1, 1, 0, 64, 32, 32]);
        h.resize(100, 0);
        std::fs::write(&path, &h).unwrap();
        assert!(check_header(&path).is_ok());
        h[16] = 0x03; // page size 768: not a power of two
        std::fs::write(&path, &h).unwrap();
        assert!(matches!(
            check_header(&path),
            Err(SqliteError::NotADatabase)
        ));
        assert!(matches!(check_header(&dir), Err(SqliteError::NotADatabase)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// One schema migration shipped with this crate, for applications that run migrations with
/// their own tooling instead of letting [`crate::SqliteStore::open`] apply them. The tables
/// are prefixed `outbox_`, so the SQL can run in the application's own file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The version, counting from 1; applied in order.
    pub version: i64,
    /// The SQL.
    pub sql: &'static str,
}

/// Every migration this crate ships, oldest first.
pub fn migrations() -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .map(|&(version, sql)| Migration { version, sql })
        .collect()
}

/// One SQL script for a file without the outbox tables: every migration, each followed by the
/// `outbox_schema_version` row the store writes, so a store opened on the file afterwards
/// finds the schema current and applies nothing. Run it in one transaction. (SQLite has no
/// conditional blocks: to upgrade a file at an older version, apply only the newer
/// [`migrations`] and record them the same way.)
pub fn migration_script() -> String {
    let mut out = format!(
        "-- outboxkit-sqlite {} schema\n\
         CREATE TABLE IF NOT EXISTS outbox_schema_version (\
         version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL);\n",
        env!("CARGO_PKG_VERSION")
    );
    for m in migrations() {
        out.push_str(&format!(
            "\n-- migration {v}\n{sql}\nINSERT INTO outbox_schema_version (version, applied_at) \
             VALUES ({v}, CAST(unixepoch('subsec') * 1000 AS INTEGER));\n",
            v = m.version,
            sql = m.sql.trim_end(),
        ));
    }
    out
}
