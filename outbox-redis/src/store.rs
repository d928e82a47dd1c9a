//! [`RedisStore`]: construction, the shared call path, and enqueueing.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Claimed, Clock, Completion, DeliveryId, DeliveryStore, EndpointId, Entropy,
    Error, ErrorKind, Lease, OsEntropy, ReleaseReport, Result, Stats, SystemClock, TenantId,
    Timestamp, WakeListener, Wakeups,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script};

use crate::config::RedisConfig;
use crate::error::{corrupt, redis_err};
use crate::rows::Args;
use crate::scripts::Scripts;

/// The outbox store on Redis. Cheap to clone: clones share one connection (a
/// [`ConnectionManager`] that reconnects on its own) and one wake-up listener.
///
/// Every multi-key step is one Lua script, so each call is atomic; see the crate docs for
/// the key layout, cluster safety, durability and cancel safety.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: redis::Client,
    pub(crate) conn: ConnectionManager,
    pub(crate) config: RedisConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Arc<dyn Entropy>,
    pub(crate) scripts: Scripts,
    pub(crate) wakeups: Wakeups,
    pub(crate) listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = self
            .listener
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            h.abort();
        }
    }
}

impl fmt::Debug for RedisStore {
    // The client's connection info may hold a password: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.config.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store over `client` with `config`, reading time from `clock` and randomness (ids,
    /// claim tokens) from `entropy`. Opens one multiplexed connection (reconnecting on its
    /// own) and loads the scripts. Fails with `Misconfigured` for a bad `config` and with
    /// `Unavailable` when Redis cannot be reached within `config.setup_timeout`.
    pub async fn new(
        client: redis::Client,
        config: RedisConfig,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Self> {
        config.validate()?;
        let cm = ConnectionManagerConfig::new()
            .set_response_timeout(config.response_timeout)
            .set_connection_timeout(config.connection_timeout)
            .set_max_delay(2_000);
        let scripts = Scripts::new();
        let setup = async {
            let mut conn = client
                .get_connection_manager_with_config(cm)
                .await
                .map_err(redis_err)?;
            check_version(&mut conn).await?;
            for s in scripts.all() {
                s.prepare_invoke()
                    .load_async(&mut conn)
                    .await
                    .map_err(redis_err)?;
            }
            Ok::<_, Error>(conn)
        };
        // The connection manager retries a refused connection with back-off; bound the
        // whole setup so an unreachable server fails fast (`RedisConfig::setup_timeout`).
        let conn = tokio::time::timeout(config.setup_timeout, setup)
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Unavailable,
                    "redis did not answer within the setup timeout",
                )
            })??;
        Ok(RedisStore {
            inner: Arc::new(Inner {
                client,
                conn,
                config,
                clock,
                entropy,
                scripts,
                wakeups: Wakeups::new(),
                listener: Mutex::new(None),
            }),
        })
    }

    /// A store on `url` (`redis://host:port/db`, `rediss://…` is not compiled in) with the
    /// default [`RedisConfig`], the system clock and the OS random source.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// [`RedisStore::connect`] with a configuration of your own.
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self> {
        let client = redis::Client::open(url)
            .map_err(|e| Error::misconfigured("url", "is not a valid redis url").with_source(e))?;
        Self::new(client, config, Arc::new(SystemClock), Arc::new(OsEntropy)).await
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.config.prefix
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// A handle to the store's connection (shared, multiplexed), e.g. to run the `MULTI`
    /// pipeline that [`RedisStore::enqueue_in`] added to.
    pub fn connection(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    /// The pub/sub channel the scripts publish to when work may have arrived.
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.inner.config.prefix)
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Run `script` with the prefix as its only key. `redis::Script` answers a `NOSCRIPT`
    /// by loading the script and trying once more; another `SCRIPT FLUSH` can land in
    /// between, so a few more rounds are allowed (a `NOSCRIPT` means nothing ran).
    pub(crate) async fn run<T: FromRedisValue>(&self, script: &Script, args: &Args) -> Result<T> {
        let mut inv = script.prepare_invoke();
        inv.key(self.inner.config.prefix.as_str());
        for a in &args.0 {
            inv.arg(a.as_slice());
        }
        let mut conn = self.inner.conn.clone();
        let mut rounds = 0;
        loop {
            match inv.invoke_async(&mut conn).await {
                Err(e) if e.kind() == redis::ErrorKind::NoScriptError && rounds < 3 => rounds += 1,
                r => return r.map_err(redis_err),
            }
        }
    }

    /// Wake this process's listeners (other processes hear the scripts' `PUBLISH`).
    pub(crate) fn wake_local(&self) {
        self.inner.wakeups.wake();
    }
}

/// The scripts use Redis 7 features (shebang flags): refuse older servers clearly.
async fn check_version(conn: &mut ConnectionManager) -> Result<()> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    let major = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m < 7 => Err(Error::misconfigured(
            "redis",
            "the redis store needs redis 7.0 or later",
        )),
        _ => Ok(()),
    }
}

#[async_trait]
impl DeliveryStore for RedisStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        self.claim_rows(request).await
    }

    async fn complete(&self, lease: &Lease, completion: &Completion) -> Result<()> {
        let items = [(lease.clone(), completion.clone())];
        self.complete_rows(&items)
            .await?
            .pop()
            .unwrap_or_else(|| Err(corrupt("reply")))
    }

    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
        self.complete_rows(items).await
    }

    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
        self.release_rows(leases, delay).await
    }

    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        self.extend_lease(lease, by).await
    }

    async fn mark_sending(&self, lease: &Lease) -> Result<()> {
        self.mark_lease_sending(lease).await
    }

    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.release_held_rows(tenant, endpoint).await
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator("replay", tenant, delivery.to_string())
            .await
            .map(drop)
    }

    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator("retry", tenant, delivery.to_string())
            .await
            .map(drop)
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator("reset", tenant, delivery.to_string())
            .await
            .map(drop)
    }

    async fn stats(&self) -> Result<Stats> {
        self.store_stats().await
    }

    async fn tenant_stats(&self, tenant: &TenantId, endpoint: Option<EndpointId>) -> Result<Stats> {
        self.tenant_counts(tenant, endpoint).await
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        self.start_listener();
        Some(self.inner.wakeups.listener())
    }
}
