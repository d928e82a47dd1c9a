//! [`RedisStore`]: construction (one server or a Redis Cluster), the shared call path, and
//! the hot path ([`DeliveryStore`], forwarding to `claim.rs`). The other traits live in files
//! of their own: `OperatorStore` in `deliveries.rs`, `MessageStore` in `enqueue.rs`,
//! `EndpointStore` in `endpoints.rs`, `Ledger` in `ledger.rs`, `TokenStore` in `tokens.rs`.

use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use outboxkit_core::{
    ClaimRequest, Claimed, Clock, Completion, DeliveryStore, EndpointId, Entropy, Error, ErrorKind,
    Lease, OsEntropy, Permits, ReleaseReport, Result, SystemClock, TenantId, Timestamp,
    WakeListener, Wakeups,
};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{FromRedisValue, RedisFuture, Script, Value};

use crate::config::RedisConfig;
use crate::error::redis_err;
use crate::rows::Args;
use crate::scripts::Scripts;

/// The outbox store on Redis. Cheap to clone: clones share one connection (a
/// [`ConnectionManager`] that reconnects on its own, or a Redis Cluster connection that
/// follows the cluster's slots) and one wake-up listener.
///
/// Every multi-key step is one Lua script, so each call is atomic; see the crate docs for
/// the key layout, shards and Redis Cluster, durability and cancel safety.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// Where the wake-up listener subscribes: the server, or each cluster seed in turn
    /// (a `PUBLISH` reaches every node of a cluster).
    pub(crate) pubsub: Vec<redis::Client>,
    pub(crate) conn: RedisConnection,
    pub(crate) config: RedisConfig,
    /// Each shard's key prefix (`RedisConfig::shard_prefix`), index = shard.
    pub(crate) shards: Vec<String>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Arc<dyn Entropy>,
    pub(crate) scripts: Scripts,
    pub(crate) wakeups: Wakeups,
    pub(crate) listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Rotates the shard a multi-shard claim starts with.
    pub(crate) turn: AtomicUsize,
    /// The event-type catalogue as last read (`event_types.rs`).
    pub(crate) catalogue: outboxkit_core::catalogue::CatalogueCache,
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
            .field("shards", &self.inner.shards.len())
            .finish_non_exhaustive()
    }
}

/// The store's connection: to one server, or to a Redis Cluster. Cheap to clone (clones
/// share the multiplexed connection); it runs commands and pipelines like any
/// [`redis::aio::ConnectionLike`], e.g. the `MULTI` pipeline [`RedisStore::enqueue_in`]
/// added to.
#[derive(Clone)]
pub struct RedisConnection(Conn);

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Conn::Single(_) => "RedisConnection(single)",
            Conn::Cluster(_) => "RedisConnection(cluster)",
        })
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        match &mut self.0 {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.0 {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Bound a store's whole setup (connecting with retries, the version check, loading the
/// scripts) by `RedisConfig::setup_timeout`, so an unreachable server fails fast.
async fn bounded<T>(config: &RedisConfig, setup: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(config.setup_timeout, setup)
        .await
        .map_err(|_| {
            Error::new(
                ErrorKind::Unavailable,
                "redis did not answer within the setup timeout",
            )
        })?
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
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connection_timeout))
            .set_max_delay(std::time::Duration::from_secs(2));
        let conn = bounded(&config, async {
            let conn = client
                .get_connection_manager_with_config(cm)
                .await
                .map_err(redis_err)?;
            Ok(RedisConnection(Conn::Single(conn)))
        })
        .await?;
        Self::open(conn, vec![client], config, clock, entropy).await
    }

    /// A store on a Redis Cluster reached through `nodes` (seed URLs such as
    /// `redis://10.0.0.1:7000`; any reachable primary is enough), with `config` (whose
    /// [`RedisConfig::shards`] spreads the outbox over that many hash slots), reading time
    /// from `clock` and randomness from `entropy`. Uses the redis crate's cluster client,
    /// which follows slot moves and fail-overs. Fails as [`RedisStore::new`] does.
    pub async fn new_cluster(
        nodes: &[&str],
        config: RedisConfig,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Self> {
        config.validate()?;
        let bad = |e| Error::misconfigured("url", "is not a valid redis url").with_source(e);
        if nodes.is_empty() {
            return Err(Error::misconfigured("url", "names no cluster node"));
        }
        let pubsub = nodes
            .iter()
            .map(|n| redis::Client::open(*n).map_err(bad))
            .collect::<Result<Vec<_>>>()?;
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(config.connection_timeout)
            .response_timeout(config.response_timeout)
            .build()
            .map_err(bad)?;
        let conn = bounded(&config, async {
            let conn = client.get_async_connection().await.map_err(redis_err)?;
            Ok(RedisConnection(Conn::Cluster(conn)))
        })
        .await?;
        Self::open(conn, pubsub, config, clock, entropy).await
    }

    async fn open(
        conn: RedisConnection,
        pubsub: Vec<redis::Client>,
        config: RedisConfig,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Self> {
        let scripts = Scripts::new();
        bounded(&config, async {
            let mut c = conn.clone();
            check_version(&mut c).await?;
            for s in scripts.all() {
                s.prepare_invoke()
                    .load_async(&mut c)
                    .await
                    .map_err(redis_err)?;
            }
            Ok(())
        })
        .await?;
        let shards = (0..config.shards).map(|i| config.shard_prefix(i)).collect();
        let store = RedisStore {
            inner: Arc::new(Inner {
                pubsub,
                conn,
                config,
                shards,
                clock,
                entropy,
                scripts,
                wakeups: Wakeups::new(),
                listener: Mutex::new(None),
                turn: AtomicUsize::new(0),
                catalogue: Default::default(),
            }),
        };
        store.upgrade().await?;
        store.refresh_catalogue().await?;
        Ok(store)
    }

    /// Upgrade an outbox written by an earlier version in place (`scripts/migrate.lua`):
    /// a few thousand rows per script call until nothing is left; a no-op once done.
    async fn upgrade(&self) -> Result<()> {
        let mut a = Args::new();
        a.n(5_000);
        for shard in 0..self.shard_count() {
            while self
                .run_on::<i64>(shard, &self.inner.scripts.migrate, &a)
                .await?
                > 0
            {}
        }
        Ok(())
    }

    /// A store on `url` with the default [`RedisConfig`], the system clock and the OS
    /// random source. `redis://host:port/db` is one server; `redis+cluster://h1:p1,h2:p2`
    /// is a Redis Cluster reached through those seed nodes (see
    /// [`RedisStore::new_cluster`]); `rediss://host:port/db` is one server over TLS
    /// (rustls, trusting [`RedisConfig::tls_root_cert`] when set, else the system's roots).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, RedisConfig::default()).await
    }

    /// [`RedisStore::connect`] with a configuration of your own.
    pub async fn connect_with(url: &str, config: RedisConfig) -> Result<Self> {
        if let Some(nodes) = cluster_nodes(url)? {
            let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
            return Self::new_cluster(&nodes, config, Arc::new(SystemClock), Arc::new(OsEntropy))
                .await;
        }
        let client = config.client(url)?;
        // One quick connection first, so an unreachable server, a failed TLS handshake or
        // refused credentials is reported at once and by name.
        config.probe(&client).await?;
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
    pub fn connection(&self) -> RedisConnection {
        self.inner.conn.clone()
    }

    /// The pub/sub channel the scripts of shard 0 publish to when work may have arrived;
    /// shard `i` publishes on `<shard i's prefix>:wake`.
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.inner.config.prefix)
    }

    /// How many shards (hash slots) the outbox is spread over.
    pub(crate) fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Run `script` with the prefix as its only key. `redis::Script` answers a `NOSCRIPT`
    /// by loading the script and trying once more; another `SCRIPT FLUSH` can land in
    /// between, so a few more rounds are allowed (a `NOSCRIPT` means nothing ran).
    pub(crate) async fn run<T: FromRedisValue>(&self, script: &Script, args: &Args) -> Result<T> {
        self.run_on(0, script, args).await
    }

    /// [`RedisStore::run`] on every shard in turn, the replies in shard order.
    pub(crate) async fn run_all<T: FromRedisValue>(
        &self,
        script: &Script,
        args: &Args,
    ) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(self.shard_count());
        for shard in 0..self.shard_count() {
            out.push(self.run_on(shard, script, args).await?);
        }
        Ok(out)
    }

    /// [`RedisStore::run`] on the shard that holds the row a call names by id: the first
    /// shard that does not answer `NotFound`.
    pub(crate) async fn run_find<T: FromRedisValue>(
        &self,
        script: &Script,
        args: &Args,
    ) -> Result<T> {
        let last = self.shard_count() - 1;
        for shard in 0..last {
            match self.run_on(shard, script, args).await {
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                r => return r,
            }
        }
        self.run_on(last, script, args).await
    }

    /// [`RedisStore::run`] on shard `shard`: its prefix is the script's only key, so the
    /// call goes to the node serving that shard's slot. The `EVALSHA` is built straight from
    /// `args` (one copy of each argument into the command's buffer); a `NOSCRIPT` loads the
    /// script and sends the same command again.
    pub(crate) async fn run_on<T: FromRedisValue>(
        &self,
        shard: usize,
        script: &Script,
        args: &Args,
    ) -> Result<T> {
        let key = self.inner.shards[shard].as_str();
        let size = key.len() + 48 + args.0.iter().map(Vec::len).sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(4 + args.0.len(), size);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(1).arg(key);
        for a in &args.0 {
            cmd.arg(a.as_slice());
        }
        let mut conn = self.inner.conn.clone();
        let mut rounds = 0;
        loop {
            match cmd.query_async(&mut conn).await {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                        && rounds < 3 =>
                {
                    rounds += 1;
                    script
                        .prepare_invoke()
                        .load_async(&mut conn)
                        .await
                        .map_err(redis_err)?;
                }
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
/// On a cluster `INFO` answers per node; the oldest node counts.
async fn check_version(conn: &mut RedisConnection) -> Result<()> {
    let info: Value = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    let mut texts = Vec::new();
    collect_text(&info, &mut texts);
    let major = texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.strip_prefix("redis_version:"))
        .filter_map(|v| v.trim().split('.').next()?.parse::<u32>().ok())
        .min();
    match major {
        Some(m) if m < 7 => Err(Error::misconfigured(
            "redis",
            "the redis store needs redis 7.0 or later",
        )),
        _ => Ok(()),
    }
}

fn collect_text(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Map(pairs) => pairs.iter().for_each(|(_, v)| collect_text(v, out)),
        Value::Array(items) => items.iter().for_each(|v| collect_text(v, out)),
        other => out.extend(crate::rows::text(other)),
    }
}

/// The seed nodes of a `redis+cluster://h1:p1,h2:p2` URL as `redis://` URLs (user and
/// password, when given, go to every node), or `None` for any other URL.
fn cluster_nodes(url: &str) -> Result<Option<Vec<String>>> {
    let Some(rest) = url.strip_prefix("redis+cluster://") else {
        return Ok(None);
    };
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let hosts = hosts.split(['/', '?']).next().unwrap_or_default();
    let nodes: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("redis://{auth}{h}"))
        .collect();
    if nodes.is_empty() {
        return Err(Error::misconfigured("url", "names no cluster node"));
    }
    Ok(Some(nodes))
}

#[async_trait]
impl DeliveryStore for RedisStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        self.claim_rows(request).await
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

    async fn take_permits(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
        rate: u32,
        want: u32,
        now: Timestamp,
    ) -> Result<Permits> {
        outboxkit_core::permits::validate_rate(rate)?;
        let mut a = Args::new();
        a.s(tenant.as_str())
            .s(endpoint.to_string())
            .n(rate)
            .n(want.min(rate))
            .t(now);
        // Shard 0 holds every endpoint's permits (it decides endpoint writes too).
        let (granted, next): (u32, i64) = self.run_on(0, &self.inner.scripts.permits, &a).await?;
        Ok(Permits {
            granted,
            next_at: Timestamp::from_unix_millis_clamped(next),
        })
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        self.start_listener();
        Some(self.inner.wakeups.listener())
    }
}
