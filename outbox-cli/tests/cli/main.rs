//! The `outbox` binary end to end: the demo, operator commands on SQLite, bad input, and the
//! relay on PostgreSQL.

mod alerts;
mod attempts;
mod bad_input;
mod broker;
mod bulk;
mod cancel;
mod claims;
mod config;
// The real local Redis Cluster the Redis adapter's tests start (free loopback ports).
#[path = "../../../outbox-redis/tests/support/cluster.rs"]
mod cluster;
mod defects;
mod delayed;
mod demo;
mod event_types;
mod features;
mod fifo;
mod headers;
mod http_enqueue;
mod listen;
mod observability;
mod operator;
mod otel;
mod paused;
mod print_sql;
mod promises;
mod relay;
mod serve;
mod smtp;
mod sql_enqueue;
mod tenancy;

use std::path::Path;
use std::process::{Command, Output};

pub const VAULT_KEY: &str = "6f75746278746573742d7661756c742d6b65792d3030303030303030303030ff";

/// What a run of `outbox` printed and returned.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// What a program other than `outbox` printed; panics naming `what` when it could not
    /// start.
    pub fn from_output(o: std::io::Result<Output>, what: &str) -> Self {
        Run::from(o.unwrap_or_else(|e| panic!("{what} could not start: {e}")))
    }

    /// Assert success and return stdout.
    #[track_caller]
    pub fn ok(self) -> String {
        assert_eq!(
            self.code, 0,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self.stdout
    }
}

pub fn outbox_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_outbox"));
    c.env("OUTBOX_VAULT_KEY", VAULT_KEY)
        .env_remove("OUTBOX_STORE")
        .env_remove("OUTBOX_NAMESPACE");
    c
}

/// Run `outbox` with `args`.
pub fn outbox(args: &[&str]) -> Run {
    Run::from(
        outbox_cmd()
            .args(args)
            .output()
            .expect("the outbox binary runs"),
    )
}

/// A fresh namespace name: `prefix` and 12 random hex digits.
pub fn namespace(prefix: &str) -> String {
    let mut b = [0u8; 6];
    outboxkit_core::Entropy::fill(&outboxkit_core::OsEntropy, &mut b);
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{prefix}_{hex}")
}

/// A loopback port nothing listens on (yet).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The test PostgreSQL's URL and a pool of `max` connections to it; `None` when it is
/// unreachable and not required (`backend_unavailable` panics when it is).
pub async fn postgres_pool(max: u32) -> Option<(String, sqlx::PgPool)> {
    let url = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    match sqlx::postgres::PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(&url)
        .await
    {
        Ok(p) => Some((url, p)),
        Err(e) => outboxkit_testing::conformance::backend_unavailable("postgres", e),
    }
}

/// Run `f(store_url, namespace)` (blocking: it drives the binary) against a fresh
/// PostgreSQL schema named from `prefix`, dropped afterwards whatever `f` did; skipped (or a
/// failure, when backends are required) without a server.
pub async fn on_postgres(prefix: &str, f: impl FnOnce(String, String) + Send + 'static) {
    let Some((url, pool)) = postgres_pool(1).await else {
        return;
    };
    let ns = namespace(prefix);
    let (u, n) = (url.clone(), ns.clone());
    let r = tokio::task::spawn_blocking(move || f(u, n)).await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{ns}\" CASCADE"
    )))
    .execute(&pool)
    .await;
    r.unwrap();
}

/// [`on_postgres`] for Redis: a fresh key prefix, its keys deleted afterwards.
pub async fn on_redis(prefix: &str, f: impl FnOnce(String, String) + Send + 'static) {
    let url =
        std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = match client.get_multiplexed_async_connection().await {
        Ok(c) => c,
        Err(e) => {
            return outboxkit_testing::conformance::backend_unavailable::<()>("redis", e)
                .unwrap_or(())
        }
    };
    let ns = namespace(prefix);
    let (u, n) = (url.clone(), ns.clone());
    let r = tokio::task::spawn_blocking(move || f(u, n)).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{ns}}}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query_async(&mut conn).await;
    }
    r.unwrap();
}

/// A webhook endpoint of `tenant` to `receiver` with `filter`, created through the library
/// (secret sealed with [`VAULT_KEY`]); the receiver verifies its signature from then on.
pub async fn signed_endpoint(
    store: std::sync::Arc<dyn outboxkit_core::Store>,
    tenant: &outboxkit_core::TenantId,
    receiver: &outboxkit_testing::WebhookReceiver,
    filter: &str,
) -> outboxkit_core::Endpoint {
    use std::sync::Arc;
    let vault = Arc::new(
        outboxkit_core::AeadVault::from_hex(VAULT_KEY, Arc::new(outboxkit_core::OsEntropy))
            .unwrap(),
    );
    let admin = outboxkit_dispatch::EndpointAdmin::new(
        store,
        vault,
        Arc::new(outboxkit_core::SystemClock),
        Arc::new(outboxkit_core::OsEntropy),
    )
    .with_url_policy(Arc::new(outboxkit_core::AnyUrl));
    let (endpoint, secret) = admin
        .create(
            tenant,
            outboxkit_dispatch::NewEndpoint {
                url: receiver.url(),
                filter: filter.into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    receiver.set_secrets(vec![secret]);
    endpoint
}

/// `sqlite:PATH` for a database in `dir`.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("outbox.sqlite").display())
}

/// The first UUID-looking word after `prefix` in `text`.
pub fn id_after(text: &str, prefix: &str) -> String {
    let at = text
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix:?} not in {text:?}"))
        + prefix.len();
    text[at..].split_whitespace().next().unwrap().to_owned()
}
