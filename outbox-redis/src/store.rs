//! [`RedisStore`]: construction, the shared call path, and enqueueing.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outboxkit_core::{
    fanout, Clock, DeliveryId, Enqueued, Entropy, Error, ErrorKind, MessageStore, NewMessage,
    OsEntropy, Result, SystemClock, Timestamp, ValidMessage, Wakeups,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script};

use crate::codec::{enqueued, items, pack_message, Args};
use crate::config::RedisConfig;
use crate::error::{corrupt, redis_err};
use crate::scripts::{Scripts, ENQUEUE};

/// The outbox store on Redis. Cheap to clone: clones share one connection (a
/// [`ConnectionManager`] that reconnects on its own) and one wake-up listener.
///
/// Every multi-key step is one Lua script, so each call is atomic; see the crate docs for
/// the key layout, cluster safety and durability.
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

    fn enqueue_args(&self, now: Timestamp, messages: &[ValidMessage]) -> Result<Args> {
        let entropy = self.inner.entropy.as_ref();
        let mut a = Args::new();
        a.t(now)
            .n(i64::try_from(messages.len()).unwrap_or(i64::MAX));
        for valid in messages {
            let m = fanout::message_row(valid, now, entropy);
            // The script derives each delivery id from this random base (same time part).
            let base = DeliveryId::generate(now, entropy);
            let packed = pack_message(&m)?;
            let emails: Vec<&str> = valid.emails.iter().map(|r| r.as_str()).collect();
            a.s(m.id.to_string())
                .s(m.tenant.as_str())
                .s(m.topic.as_str())
                .opt(m.ordering_key.as_ref())
                .opt(m.idempotency_key.as_ref())
                .t(m.available_at)
                .s(packed)
                .b(m.payload)
                .s(base.to_string())
                .s(emails.join("\n"));
        }
        Ok(a)
    }

    /// Add the enqueue of `message` to `pipe`, a `MULTI` pipeline you execute yourself
    /// together with your own writes: the message and its fan-out are written if and only
    /// if the transaction runs.
    ///
    /// The pipeline MUST be atomic (`redis::pipe().atomic()`); anything else is refused
    /// with `InvalidInput`. Validation happens here, so an invalid message adds nothing.
    /// The fan-out (consumers, the tenant's endpoints) and the idempotency check happen
    /// inside the script at `EXEC`, so a duplicate key still writes nothing. The command is
    /// an `EVAL` of the script's text, not an `EVALSHA`: inside `MULTI` a `NOSCRIPT` error
    /// could not be retried, and `EXEC` would apply your writes without the message.
    ///
    /// The command's reply decodes into [`crate::EnqueueReply`]; do not `.ignore()` it if
    /// you want to know whether the message was a duplicate.
    ///
    /// ```no_run
    /// # async fn f(store: outboxkit_redis::RedisStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use outboxkit_core::NewMessage;
    /// use outboxkit_redis::EnqueueReply;
    ///
    /// let mut pipe = redis::pipe();
    /// pipe.atomic().set("order:42", "paid").ignore();
    /// store.enqueue_in(&mut pipe, NewMessage::new("order.paid", serde_json::json!({"id": 42})))?;
    /// let (reply,): (EnqueueReply,) = pipe.query_async(&mut store.connection()).await?;
    /// println!("message {}", reply.0.message_id);
    /// # Ok(()) }
    /// ```
    pub fn enqueue_in(&self, pipe: &mut redis::Pipeline, message: NewMessage) -> Result<()> {
        if !pipe.is_transaction() {
            return Err(Error::invalid_input(
                "pipeline",
                "must be atomic: call `.atomic()` on it first",
            ));
        }
        let now = self.now();
        let valid = message.validate(&self.inner.config.limits, now)?;
        let args = self.enqueue_args(now, std::slice::from_ref(&valid))?;
        pipe.cmd("EVAL")
            .arg(ENQUEUE)
            .arg(1)
            .arg(self.inner.config.prefix.as_str());
        for a in &args.0 {
            pipe.arg(a.as_slice());
        }
        Ok(())
    }

    async fn write(&self, now: Timestamp, valid: &[ValidMessage]) -> Result<Vec<Enqueued>> {
        let args = self.enqueue_args(now, valid)?;
        let reply: redis::Value = self.run(&self.inner.scripts.enqueue, &args).await?;
        let out = items(reply)?
            .iter()
            .map(|v| enqueued(v).ok_or_else(|| corrupt("reply")))
            .collect::<Result<Vec<_>>>()?;
        if out.iter().any(|e| e.deliveries > 0) {
            self.wake_local();
        }
        Ok(out)
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
impl MessageStore for RedisStore {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        let now = self.now();
        let valid = message.validate(&self.inner.config.limits, now)?;
        self.write(now, std::slice::from_ref(&valid))
            .await?
            .pop()
            .ok_or_else(|| corrupt("reply"))
    }

    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let valid = messages
            .into_iter()
            .map(|m| m.validate(&self.inner.config.limits, now))
            .collect::<Result<Vec<_>>>()?;
        self.write(now, &valid).await
    }
}
