//! [`SqliteStore`]: the outbox on one SQLite database. This file opens it and holds the hot
//! path ([`DeliveryStore`]); the other traits live in files of their own: `OperatorStore` in
//! `deliveries.rs`, `MessageStore` in `enqueue.rs`, `EndpointStore` in `endpoints.rs`,
//! `Ledger` in `ledger.rs`, `TokenStore` in `tokens.rs`; the claim's internals in `claim/`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    ClaimRequest, Claimed, Clock, Completion, DeadReason, DeliveryStore, EndpointId, Entropy,
    Error, ErrorKind, Lease, Limits, OsEntropy, Permits, ReleaseReport, Result, SystemClock,
    TenantId, Timestamp, Verdict, WakeListener, Wakeups,
};
use rusqlite::Transaction;

use crate::config::SqliteConfig;
use crate::conn::{snapshot, Pool};
use crate::routes::Routes;
use crate::{claim, wake};

/// The outbox on SQLite. `Clone` is cheap and shares the connections.
///
/// Handles opened on the same file in one process share their wake-ups: an enqueue through
/// any of them wakes the dispatchers of all.
///
/// All SQLite calls run on the store's own threads (one writer connection, `readers`
/// read-only connections), never on the async executor. Writes take `BEGIN IMMEDIATE`, so
/// several processes may share one database file: claims stay exclusive, and a lock held
/// longer than the busy timeout is reported as `Unavailable`.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    limits: Limits,
    busy_timeout: Duration,
    wakeups: Arc<Wakeups>,
    path: PathBuf,
    /// The writer's copy of consumers and endpoints (`routes.rs`).
    routes: Arc<Routes>,
    /// The rows this store claimed, as their leases left them (`claim/fences.rs`).
    fences: claim::Fences,
    /// The event-type catalogue as last read (`event_types.rs`).
    catalogue: outboxkit_core::catalogue::CatalogueCache,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// The connections (for the trait impls in files of their own, e.g. `tokens.rs`).
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The store's clock and message limits (for `enqueue.rs`).
    pub(crate) fn entropy(&self) -> &dyn Entropy {
        &*self.inner.entropy
    }

    /// The writer's routing copy (for `enqueue.rs`, and the writes that change routes).
    pub(crate) fn routes(&self) -> &Arc<Routes> {
        &self.inner.routes
    }

    /// The event-type catalogue as last read (for `event_types.rs`).
    pub(crate) fn catalogue(&self) -> &outboxkit_core::catalogue::CatalogueCache {
        &self.inner.catalogue
    }

    pub(crate) fn clock_and_limits(&self) -> (&dyn Clock, &Limits) {
        (&*self.inner.clock, &self.inner.limits)
    }

    /// Open (creating when missing) the database of `config` and bring its schema up to
    /// date. Time comes from `clock`, claim tokens and ids from `entropy`.
    ///
    /// An existing file that is not a SQLite database, or is corrupt, fails with
    /// `Misconfigured` and is left untouched; a schema newer than this crate's fails the
    /// same way. Needs a tokio runtime (the blocking work runs on a blocking thread).
    pub async fn open(
        config: SqliteConfig,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Self> {
        config.validate()?;
        let now = clock.now();
        let cfg = config.clone();
        let (pool, wakeups) = tokio::task::spawn_blocking(move || {
            let pool = Pool::open(&cfg, now)?;
            let wakeups = if cfg.is_memory() {
                Arc::new(Wakeups::new())
            } else {
                wake::shared(&cfg.path)
            };
            Ok::<_, Error>((pool, wakeups))
        })
        .await
        .map_err(|e| {
            Error::new(ErrorKind::Unexpected, "opening the sqlite database failed").with_source(e)
        })??;
        let routes = Arc::new(Routes::new(pool.rollbacks()));
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                pool,
                clock,
                entropy,
                limits: config.limits,
                busy_timeout: config.busy_timeout,
                wakeups,
                path: config.path,
                routes,
                fences: claim::Fences::default(),
                catalogue: Default::default(),
            }),
        })
    }

    /// Open the database at `path` with the default settings, the system clock and the
    /// operating system's randomness.
    pub async fn open_path(path: impl Into<PathBuf>) -> Result<Self> {
        Self::open(
            SqliteConfig::new(path),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .await
    }

    /// The database path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Wake this process's dispatchers: call it after committing a transaction in which
    /// [`SqliteStore::enqueue_in`] wrote messages. (The store's own writes wake them by
    /// themselves.)
    pub fn notify(&self) {
        self.inner.wakeups.wake();
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction on the writer thread, with the current
    /// time and the entropy.
    pub(crate) async fn write<T, F>(&self, mut f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>, Timestamp, &dyn Entropy) -> crate::error::Result<T>
            + Send
            + 'static,
    {
        let clock = self.inner.clock.clone();
        let entropy = self.inner.entropy.clone();
        self.inner
            .pool
            .write_tx(move |tx| f(tx, clock.now(), &*entropy))
            .await
    }

    /// [`SqliteStore::write`], but on the caller's thread when the writer is idle and SQLite
    /// grants the write lock at once (`Pool::write_inline`): no hand-off to the writer
    /// thread and back. For a lone enqueue only: running claims and completion batches here
    /// too was measured without a clear gain (BENCHMARKS.md) and would block the executor
    /// for a 100-row claim.
    pub(crate) async fn write_here<T, F>(&self, mut f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>, Timestamp, &dyn Entropy) -> crate::error::Result<T>
            + Send
            + 'static,
    {
        let inline = {
            let (clock, entropy) = (&self.inner.clock, &self.inner.entropy);
            self.inner
                .pool
                .write_inline(|tx| f(tx, clock.now(), &**entropy))
        };
        match inline {
            Some(out) => out.map_err(Error::from),
            None => self.write(f).await,
        }
    }

    /// Run `f` in a read transaction on a reader thread, with the current time.
    pub(crate) async fn read<T, F>(&self, mut f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>, Timestamp) -> crate::error::Result<T> + Send + 'static,
    {
        let clock = self.inner.clock.clone();
        let busy = self.inner.busy_timeout;
        self.inner
            .pool
            .read(move |conn| snapshot(conn, busy, |tx| f(tx, clock.now())))
            .await
    }

    pub(crate) fn wake_if(&self, woke: bool) {
        if woke {
            self.inner.wakeups.wake();
        }
    }
}

#[async_trait]
impl DeliveryStore for SqliteStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        request.validate()?;
        let request = request.clone();
        let (claimed, fences) = self
            .write(move |tx, now, entropy| claim::claim(tx, &request, now, entropy))
            .await?;
        self.inner.fences.keep(fences);
        Ok(claimed)
    }

    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        // A `gone` verdict disables its endpoint: a change of routes.
        let change = items
            .iter()
            .any(|(_, c)| {
                matches!(
                    c.verdict,
                    Verdict::Dead {
                        reason: DeadReason::Gone
                    }
                )
            })
            .then(|| self.routes().change());
        let fences: Vec<_> = items
            .iter()
            .map(|(lease, _)| self.inner.fences.take(lease))
            .collect();
        let items = items.to_vec();
        self.write(move |tx, now, _| {
            let _routes = &change;
            claim::complete_many(tx, &items, &fences, now)
        })
        .await
    }

    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
        if leases.is_empty() {
            return Ok(ReleaseReport::default());
        }
        let fences: Vec<_> = leases.iter().map(|l| self.inner.fences.take(l)).collect();
        let leases = leases.to_vec();
        let report = self
            .write(move |tx, now, _| claim::release(tx, &leases, &fences, delay, now))
            .await?;
        self.wake_if(report.released > 0);
        Ok(report)
    }

    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        let lease = lease.clone();
        self.write(move |tx, now, _| claim::extend(tx, &lease, by, now))
            .await
    }

    async fn mark_sending(&self, lease: &Lease) -> Result<()> {
        let lease = lease.clone();
        self.write(move |tx, now, _| claim::mark_sending(tx, &lease, now))
            .await
    }

    async fn take_permits(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
        rate: u32,
        want: u32,
        now: Timestamp,
    ) -> Result<Permits> {
        outboxkit_core::permits::validate_rate(rate)?;
        let tenant = tenant.clone();
        self.write(move |tx, _, _| crate::permits::take(tx, &tenant, endpoint, rate, want, now))
            .await
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        Some(self.inner.wakeups.listener())
    }
}
