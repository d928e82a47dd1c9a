//! [`PostgresStore`]: construction, migrations, the inherent enqueue-in-a-transaction
//! methods, and the hot path ([`DeliveryStore`], forwarding to `claim/`). The other traits
//! live in files of their own: `OperatorStore` in `deliveries.rs`, `MessageStore` in
//! `enqueue.rs`, `EndpointStore` in `endpoints.rs`, `Ledger` in `ledger.rs`, `TokenStore`
//! in `tokens.rs`.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    ClaimRequest, Claimed, Clock, Completion, DeliveryStore, EndpointId, Enqueued, Entropy, Error,
    Lease, NewMessage, OsEntropy, Permits, ReleaseReport, Result, SystemClock, TenantId, Timestamp,
    WakeListener,
};
use sqlx::postgres::{PgConnection, PgPool};
use tokio::runtime::Handle;

use crate::config::PostgresConfig;
use crate::error::DbResult;
use crate::schema::{self, Tables};
use crate::wake::Wake;

/// The outbox on PostgreSQL: every store trait of `outboxkit-core` on one `sqlx` pool.
///
/// Cheap to clone (one shared inner value). See the crate docs for set-up, enqueue in a
/// transaction, and dispatch.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub pool: PgPool,
    pub config: PostgresConfig,
    pub channel: String,
    pub sql: Statements,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
    pub wake: Wake,
    /// The claim's and the settle's own connections (`hot.rs`).
    pub hot: crate::hot::HotPools,
    /// The quoted table names (for the few statements built at run time).
    pub tables: Tables,
    /// How far (ms, exclusive) the history's partitions are known to reach.
    pub history_upto: AtomicI64,
    /// The event-type catalogue as last read (`event_types.rs`).
    pub catalogue: outboxkit_core::catalogue::CatalogueCache,
}

/// Every statement of one store, built once with the schema name substituted, then reused
/// (sqlx prepares and caches each text per connection). The texts live in `sql/`, one file per
/// store file that binds them. Every time is a bound parameter from
/// the injected clock; no statement reads `now()`.
#[derive(Debug)]
pub(crate) struct Statements {
    pub enqueue: crate::sql::enqueue::Sql,
    pub claim: crate::sql::claim::Sql,
    pub deliveries: crate::sql::deliveries::Sql,
    pub ledger: crate::sql::ledger::Sql,
    pub endpoints: crate::sql::endpoints::Sql,
    pub permits: crate::sql::Statement,
}

impl Statements {
    fn new(schema: &str) -> Result<Self> {
        let tables = Tables::new(schema);
        Ok(Statements {
            enqueue: crate::sql::enqueue::Sql::new(&tables)?,
            claim: crate::sql::claim::Sql::new(&tables)?,
            deliveries: crate::sql::deliveries::Sql::new(&tables)?,
            ledger: crate::sql::ledger::Sql::new(&tables)?,
            endpoints: crate::sql::endpoints::Sql::new(&tables)?,
            permits: crate::sql::permits::statement(&tables)?,
        })
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.inner.config.schema)
            .field("channel", &self.inner.channel)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A store on `pool` with `config`, reading time from `clock` and randomness (ids, claim
    /// tokens) from `entropy`, its background tasks on the current tokio runtime (see
    /// [`PostgresStore::new_on`]). `Misconfigured` when called outside a tokio runtime.
    pub fn new(
        pool: PgPool,
        config: PostgresConfig,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Self> {
        let handle = Handle::try_current().map_err(|_| {
            Error::misconfigured(
                "runtime",
                "PostgresStore::new needs a tokio runtime; use PostgresStore::new_on",
            )
        })?;
        Self::new_on(&handle, pool, config, clock, entropy)
    }

    /// A store on `pool` with `config`, reading time from `clock` and randomness from
    /// `entropy`, whose two background tasks run on `runtime`: the wake-up listener (it
    /// connects when the first `wake_listener()` is asked for) and the notifier that sends
    /// the `NOTIFY` after `enqueue` commits. Both reconnect after errors, are restarted if
    /// they ever panic, and stop when the last clone of the store is dropped. Validates the
    /// configuration and builds every statement once; connects to nothing. Call
    /// [`PostgresStore::migrate`] before first use.
    pub fn new_on(
        runtime: &Handle,
        pool: PgPool,
        config: PostgresConfig,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Self> {
        config.validate()?;
        // The wake-up tag comes from the OS, not the injected entropy: two stores built with the
        // same seeded entropy (a producer and a relay in a test) must not take each other's
        // `NOTIFY` for their own echo.
        let wake = Wake::start(runtime, &pool, &config, &outboxkit_core::OsEntropy);
        let hot = crate::hot::HotPools::new(runtime, &pool, &config);
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                channel: config.channel(),
                sql: Statements::new(&config.schema)?,
                pool,
                clock,
                entropy,
                wake,
                hot,
                history_upto: AtomicI64::new(i64::MIN),
                catalogue: Default::default(),
                tables: Tables::new(&config.schema),
                config,
            }),
        })
    }

    /// Connect to `url` with a default pool and [`PostgresConfig::default`] (schema
    /// `outbox`), the system clock and the operating system's randomness.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connect to `url` with `config` (TLS from the URL's `sslmode`/`sslrootcert`, the
    /// config's connect timeout and pool size; see [`PostgresConfig::connect_pool`]), the
    /// system clock and the operating system's randomness. A failure names its cause.
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<Self> {
        config.validate()?;
        let pool = config.connect_pool(url).await?;
        Self::new(pool, config, Arc::new(SystemClock), Arc::new(OsEntropy))
    }

    /// The pool (for the application's own transactions around [`PostgresStore::enqueue_in`]).
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The configuration.
    pub fn config(&self) -> &PostgresConfig {
        &self.inner.config
    }

    /// The LISTEN/NOTIFY channel of this outbox.
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    /// Create the schema and apply every migration not yet applied, in order, recording each
    /// in `<schema>.schema_migrations`. Runs in one transaction under a per-schema advisory
    /// lock, so concurrent calls (several processes starting at once) are safe: one applies,
    /// the others wait and find nothing left to do. Returns how many migrations were applied.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it returns rolls the transaction back (unless its commit
    /// was already sent): the schema is left at its earlier version, never half-migrated.
    pub async fn migrate(&self) -> Result<u32> {
        let now = self.inner.clock.now();
        let applied = schema::migrate(&self.inner.pool, &self.inner.config, now).await?;
        self.ensure_history(now).await?;
        Ok(applied)
    }

    /// Make sure the history has its day partitions up to 3 days after `now`'s day (the
    /// migration's `history_ensure`), before a statement that may finish a delivery: one
    /// extra statement when the clock nears the last partition this store knows of, none
    /// otherwise. Idempotent and serialised in the database, so several stores may call it.
    pub(crate) async fn ensure_history(&self, now: outboxkit_core::Timestamp) -> Result<()> {
        const DAY: i64 = 86_400_000;
        let at = crate::rows::ms(now);
        if at.saturating_add(DAY) < self.inner.history_upto.load(Ordering::Relaxed) {
            return Ok(());
        }
        let upto = (at.div_euclid(DAY) + 3) * DAY;
        let params = crate::sql::Params::new().set("upto", upto);
        (self.inner.sql.claim.history_ensure.bind(params)?)
            .execute(&self.inner.pool)
            .await
            .db()?;
        self.inner.history_upto.fetch_max(upto, Ordering::Relaxed);
        Ok(())
    }

    /// Write `message` and its fan-out deliveries on `conn`, inside the caller's transaction
    /// (pass `&mut *tx`): the event exists if and only if the transaction commits. One
    /// statement: the message, the deliveries to every matching consumer, active endpoint of
    /// the tenant and e-mail recipient, and one `NOTIFY` delivered at commit (unless
    /// [`PostgresConfig::notify_in_transaction`] is off). A duplicate
    /// idempotency key writes nothing and never raises an error that would abort the
    /// caller's transaction.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it returns may leave the statement executed in the
    /// caller's transaction or not; the caller, who owns the transaction, decides: rolling
    /// it back (or dropping it) leaves nothing.
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        message: NewMessage,
    ) -> Result<Enqueued> {
        self.enqueue_on(conn, message, self.in_transaction_channel())
            .await
    }

    /// Write many messages and their deliveries on `conn`, inside the caller's transaction:
    /// in one statement (`unnest` arrays: constant text whatever the batch size), or, for a
    /// batch of at least [`PostgresConfig::copy_batches_from`] messages without idempotency
    /// keys, with binary `COPY` (one statement for the destinations, the two copies, and the
    /// `NOTIFY`; the same rows either way). Every
    /// message is validated before anything is written; a message with the idempotency key
    /// of an earlier one in the batch is a duplicate of it. One `NOTIFY` for the call, as for
    /// [`PostgresStore::enqueue_in`].
    ///
    /// # Cancel safety
    ///
    /// As [`PostgresStore::enqueue_in`]: the caller's transaction decides.
    pub async fn enqueue_batch_in(
        &self,
        conn: &mut PgConnection,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Enqueued>> {
        self.enqueue_batch_on(conn, messages, self.in_transaction_channel())
            .await
    }

    /// Wake the dispatchers of this outbox in every process: this process's listeners at
    /// once, the others through one `NOTIFY` sent by the store's notifier task (coalesced
    /// with concurrent calls, after this call). Call it after committing a transaction that
    /// used [`PostgresStore::enqueue_in`] when [`PostgresConfig::notify_in_transaction`] is
    /// off. Never blocks and never fails.
    ///
    /// The `NOTIFY` is sent by a background task: a process that exits right after calling
    /// this may exit before it is sent (the other processes then find the message at their
    /// next poll). A producer that may exit soon calls [`PostgresStore::notify_now`] instead.
    pub fn notify(&self) {
        self.inner.wake.wakeups().wake();
        self.inner.wake.notify_later();
    }

    /// As [`PostgresStore::notify`], but the `NOTIFY` is sent on a pooled connection before
    /// this returns, so it reaches every listening dispatcher even if this process exits
    /// next (what [`MessageStore::enqueue`](outboxkit_core::MessageStore::enqueue) does for
    /// itself). Never fails: when no connection can be had or the send fails, the
    /// notification is handed to the background task, which retries it.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the notification sent or not; nothing else changes.
    pub async fn notify_now(&self) {
        match self.inner.pool.acquire().await {
            Ok(mut conn) => self.notify_on(&mut conn).await,
            Err(e) => {
                tracing::warn!(error = %e, "outbox wake-up notification failed; the notifier retries it");
                self.notify();
            }
        }
    }
}

/// `DeliveryStore`: the hot path, in `claim/`.
#[async_trait]
impl DeliveryStore for PostgresStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        self.claim_now(request).await
    }

    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
        self.complete_now(items).await
    }

    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
        self.release_now(leases, delay).await
    }

    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        self.extend_now(lease, by).await
    }

    async fn mark_sending(&self, lease: &Lease) -> Result<()> {
        self.mark_sending_now(lease).await
    }

    async fn take_permits(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
        rate: u32,
        want: u32,
        now: Timestamp,
    ) -> Result<Permits> {
        self.take_permits_now(tenant, endpoint, rate, want, now)
            .await
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        let listener = self.inner.wake.wakeups().listener();
        self.inner.wake.listen();
        Some(listener)
    }

    /// As many as the claim pool has connections (`hot.rs`): each claim runs in a server
    /// process of its own.
    fn parallel_claims(&self) -> usize {
        self.inner.hot.claims_at_once
    }
}
