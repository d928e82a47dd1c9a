//! One isolated outbox per test on a real backend: a random PostgreSQL schema, a random
//! Redis key prefix or a temporary SQLite file, opened in-process and described to the
//! `outbox relay` processes by the same `--store`/`--namespace`. Dropping it removes
//! everything it created (schema, keys, files), on every path.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    AeadVault, DynSecretVault, Entropy, EntropyExt, OsEntropy, Store, SystemClock, TenantId,
    WebhookSecret,
};
use outboxkit_dispatch::Timer;
use outboxkit_dispatch::{EndpointAdmin, NewEndpoint};
use outboxkit_postgres::sqlx::postgres::PgPoolOptions;
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::conformance::backend_unavailable;
use tempfile::TempDir;

/// Which database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    Sqlite,
    Redis,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Postgres => "postgres",
            Kind::Sqlite => "sqlite",
            Kind::Redis => "redis",
        }
    }
}

pub fn postgres_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The typed store behind [`Backend::store`], for backend-specific faults.
#[derive(Clone, Debug)]
pub enum Typed {
    Postgres(PostgresStore),
    Sqlite(SqliteStore),
    Redis(RedisStore),
}

type Cleanup = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// An isolated outbox, its vault key, and a scratch directory for logs.
pub struct Backend {
    pub kind: Kind,
    pub store: Arc<dyn Store>,
    pub typed: Typed,
    /// `--store` for the relay (Postgres: with an `application_name` naming this test, so its
    /// connections can be found and cut).
    pub store_url: String,
    /// `--namespace`: the schema, or the Redis prefix without its braces.
    pub namespace: String,
    /// The Postgres `application_name` of the relays' connections.
    pub app_name: String,
    /// The relay's `OUTBOX_VAULT_KEY` (64 hex digits).
    pub vault_key: String,
    pub vault: Arc<DynSecretVault>,
    pub clock: Arc<dyn Timer>,
    pub entropy: Arc<dyn Entropy>,
    pub tenant: TenantId,
    pub dir: TempDir,
    cleanup: Option<Cleanup>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("kind", &self.kind)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// Open a fresh outbox on `kind`; `None` when the backend is unreachable and not
    /// required (the skip is announced loudly).
    pub async fn open(kind: Kind) -> Option<Backend> {
        let clock: Arc<dyn Timer> = Arc::new(SystemClock);
        let entropy: Arc<dyn Entropy> = Arc::new(OsEntropy);
        let tag = format!("{:012x}", OsEntropy.next_u64() >> 16);
        let dir = tempfile::Builder::new()
            .prefix("outbox-reliability-")
            .tempdir()
            .expect("a temporary directory");
        let mut key = [0u8; 32];
        entropy.fill(&mut key);
        let vault_key: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let vault: Arc<DynSecretVault> =
            Arc::new(AeadVault::from_hex(&vault_key, entropy.clone()).expect("a valid vault key"));
        let app_name = format!("outbox-rel-{tag}");
        let (typed, store_url, namespace, cleanup): (Typed, String, String, Cleanup) = match kind {
            Kind::Postgres => {
                let url = postgres_url();
                let pool = match PgPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(20))
                    .connect(&url)
                    .await
                {
                    Ok(p) => p,
                    Err(e) => return backend_unavailable("postgres", e),
                };
                let schema = format!("rel_{tag}");
                let store = PostgresStore::new(
                    pool.clone(),
                    PostgresConfig::new(schema.clone()),
                    clock.clone(),
                    entropy.clone(),
                )
                .expect("a valid postgres configuration");
                store.migrate().await.expect("the migrations apply");
                let sep = if url.contains('?') { '&' } else { '?' };
                let relay_url = format!("{url}{sep}application_name={app_name}");
                let cleanup: Cleanup = Box::pin(async move {
                    pool.close().await;
                    drop_schema(&schema).await;
                });
                (
                    Typed::Postgres(store),
                    relay_url,
                    format!("rel_{tag}"),
                    cleanup,
                )
            }
            Kind::Sqlite => {
                let path = dir.path().join("outbox.db");
                let store = SqliteStore::open(
                    SqliteConfig::new(path.clone()),
                    clock.clone(),
                    entropy.clone(),
                )
                .await
                .expect("open the sqlite store");
                let url = format!("sqlite:{}", path.display());
                (
                    Typed::Sqlite(store),
                    url,
                    "outbox".to_owned(),
                    Box::pin(async {}),
                )
            }
            Kind::Redis => {
                let namespace = format!("rel-{tag}");
                let prefix = format!("{{{namespace}}}");
                let client = match redis::Client::open(redis_url()) {
                    Ok(c) => c,
                    Err(e) => return backend_unavailable("redis", e),
                };
                let store = match RedisStore::new(
                    client,
                    RedisConfig::with_prefix(prefix.clone()),
                    clock.clone(),
                    entropy.clone(),
                )
                .await
                {
                    Ok(s) => s,
                    Err(e) => return backend_unavailable("redis", e),
                };
                let cleanup: Cleanup = Box::pin(delete_keys(prefix));
                (Typed::Redis(store), redis_url(), namespace, cleanup)
            }
        };
        let store: Arc<dyn Store> = match &typed {
            Typed::Postgres(s) => Arc::new(s.clone()),
            Typed::Sqlite(s) => Arc::new(s.clone()),
            Typed::Redis(s) => Arc::new(s.clone()),
        };
        Some(Backend {
            kind,
            store,
            typed,
            store_url,
            namespace,
            app_name,
            vault_key,
            vault,
            clock,
            entropy,
            tenant: TenantId::default(),
            dir,
            cleanup: Some(cleanup),
        })
    }

    /// `--store URL --namespace NS`.
    pub fn store_args(&self) -> Vec<String> {
        vec![
            "--store".into(),
            self.store_url.clone(),
            "--namespace".into(),
            self.namespace.clone(),
        ]
    }

    /// The endpoint administration over this outbox, sealing with the relay's key.
    pub fn admin(&self) -> EndpointAdmin {
        EndpointAdmin::new(
            self.store.clone(),
            self.vault.clone(),
            self.clock.clone(),
            self.entropy.clone(),
        )
        // The receivers live on loopback over http: the relay's own flags, and no more.
        .with_url_policy(std::sync::Arc::new(
            outboxkit_http::EgressPolicy::default()
                .allow_http(true)
                .allow_private(true),
        ))
    }

    /// Create a webhook endpoint for every topic at `url`; returns its id and secret.
    pub async fn endpoint(&self, url: &str) -> (outboxkit_core::EndpointId, WebhookSecret) {
        let (e, secret) = self
            .admin()
            .create(
                &self.tenant,
                NewEndpoint {
                    url: url.to_owned(),
                    filter: "*".into(),
                    ..NewEndpoint::default()
                },
            )
            .await
            .expect("create the endpoint");
        (e.id, secret)
    }

    /// A path in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(c) = self.cleanup.take() {
            block_on_thread(c);
        }
    }
}

/// Run `f` to completion on a fresh thread with its own runtime (usable from `Drop`, inside
/// or outside a runtime, while panicking or not), for at most 30 s.
pub fn block_on_thread<F: Future<Output = ()> + Send + 'static>(f: F) {
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async {
                let _ = tokio::time::timeout(Duration::from_secs(30), f).await;
            });
        }
    })
    .join();
}

async fn drop_schema(schema: &str) {
    use outboxkit_postgres::sqlx::Connection;
    let Ok(mut conn) = outboxkit_postgres::sqlx::PgConnection::connect(&postgres_url()).await
    else {
        eprintln!("could not connect to drop schema {schema}");
        return;
    };
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    if let Err(e) = outboxkit_postgres::sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
    {
        eprintln!("could not drop schema {schema}: {e}");
    }
    let _ = conn.close().await;
}

async fn delete_keys(prefix: String) {
    let Ok(client) = redis::Client::open(redis_url()) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        eprintln!("could not connect to delete the keys under {prefix}");
        return;
    };
    let mut cursor: u64 = 0;
    for _ in 0..100_000 {
        let Ok((next, keys)): redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
        else {
            return;
        };
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> =
                redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}
