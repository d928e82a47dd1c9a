//! Opening a store from `--store`: `sqlite:PATH`, `postgres://…`, `redis://…`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use outboxkit_core::{AeadVault, DynSecretVault, Entropy, OsEntropy, Store, SystemClock, TenantId};
use outboxkit_dispatch::Timer;
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};

use crate::error::{CliError, CliResult};

/// How to connect to PostgreSQL or Redis.
#[derive(Debug, Args, Clone)]
pub struct ConnectArgs {
    /// How long to wait for PostgreSQL or Redis to answer (TCP, TLS, authentication) before
    /// failing with a message that names the cause.
    #[arg(long, env = "OUTBOX_CONNECT_TIMEOUT", default_value = "5s")]
    pub connect_timeout: String,
    /// PEM certificates to trust for `rediss://` instead of the system's roots (PostgreSQL:
    /// put `sslmode=verify-full&sslrootcert=PATH` in the URL).
    #[arg(long, env = "OUTBOX_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// Redis only: how many hash slots (shards) the outbox is spread over (1-64), for a
    /// Redis Cluster (`redis+cluster://host:port,host:port`). Every process sharing an
    /// outbox must use the same number.
    #[arg(long, env = "OUTBOX_REDIS_SHARDS", default_value_t = 1)]
    pub shards: u16,
}

impl ConnectArgs {
    /// The connection settings, with `max_connections` for a PostgreSQL pool.
    pub fn settings(&self, max_connections: Option<u32>) -> CliResult<Connect> {
        let timeout = crate::util::parse_flag_duration("connect-timeout", &self.connect_timeout)?;
        if timeout.is_zero() {
            return Err(CliError::usage(
                "invalid input: --connect-timeout: must be longer than zero",
            ));
        }
        if !(1..=64).contains(&self.shards) {
            return Err(CliError::usage(
                "invalid input: --shards: must be from 1 to 64",
            ));
        }
        Ok(Connect {
            timeout,
            max_connections,
            ca_cert: self.ca_cert.clone(),
            shards: self.shards,
        })
    }
}

/// Connection settings for [`open_url_with`].
#[derive(Debug, Clone)]
pub struct Connect {
    /// The connect timeout (PostgreSQL and Redis).
    pub timeout: std::time::Duration,
    /// The PostgreSQL pool size (default 8).
    pub max_connections: Option<u32>,
    /// Roots for `rediss://`.
    pub ca_cert: Option<PathBuf>,
    /// Redis shards (hash slots), 1 unless `--shards`.
    pub shards: u16,
}

impl Default for Connect {
    fn default() -> Self {
        Connect {
            timeout: std::time::Duration::from_secs(5),
            max_connections: None,
            ca_cert: None,
            shards: 1,
        }
    }
}

/// Where the outbox lives (for commands that act on every tenant).
#[derive(Debug, Args, Clone)]
pub struct LocationArgs {
    /// The store: `sqlite:PATH`, `postgres://user@host/db[?sslmode=…]`,
    /// `redis://host:port` (`rediss://` for TLS) or `redis+cluster://host:port,host:port`.
    #[arg(long, env = "OUTBOX_STORE")]
    pub store: String,
    /// The PostgreSQL schema, or the Redis key prefix `{NAMESPACE}`.
    #[arg(long, env = "OUTBOX_NAMESPACE", default_value = "outbox")]
    pub namespace: String,
    #[command(flatten)]
    pub connect: ConnectArgs,
}

impl LocationArgs {
    /// Open the store (it must exist: `outbox migrate` creates it).
    pub async fn open(&self) -> CliResult<Env> {
        self.open_sized(None).await
    }

    /// Open the store with a PostgreSQL pool of `max_connections`.
    pub async fn open_sized(&self, max_connections: Option<u32>) -> CliResult<Env> {
        let connect = self.connect.settings(max_connections)?;
        open_url_with(
            &self.store,
            &self.namespace,
            "default",
            None,
            false,
            &connect,
        )
        .await
    }
}

/// Where the outbox lives, and whose part of it.
#[derive(Debug, Args, Clone)]
pub struct StoreArgs {
    /// The store: `sqlite:PATH`, `postgres://user@host/db[?sslmode=…]`,
    /// `redis://host:port` (`rediss://` for TLS) or `redis+cluster://host:port,host:port`.
    #[arg(long, env = "OUTBOX_STORE")]
    pub store: String,
    /// The PostgreSQL schema, or the Redis key prefix `{NAMESPACE}`.
    #[arg(long, env = "OUTBOX_NAMESPACE", default_value = "outbox")]
    pub namespace: String,
    /// The tenant (`default` when not given).
    #[arg(long)]
    pub tenant: Option<String>,
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// The key that seals endpoint secrets (only on the commands that read or write them).
#[derive(Debug, Args, Clone)]
pub struct VaultArgs {
    /// The key sealing endpoint secrets: 64 hex digits (`outbox keygen` makes one).
    #[arg(long, env = "OUTBOX_VAULT_KEY", hide_env_values = true)]
    pub vault_key: Option<String>,
}

impl StoreArgs {
    /// The tenant named with `--tenant`, if any (`purge` and `stats` without it act on
    /// every tenant).
    pub fn tenant_given(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The tenant of the command: `--tenant`, else `default`.
    pub fn tenant_name(&self) -> &str {
        self.tenant.as_deref().unwrap_or("default")
    }

    /// Open the store (it must exist: `outbox migrate` creates it).
    pub async fn open(&self) -> CliResult<Env> {
        open_url_with(
            &self.store,
            &self.namespace,
            self.tenant_name(),
            None,
            false,
            &self.connect.settings(None)?,
        )
        .await
    }

    /// Open the store with the vault key.
    pub async fn open_with(&self, vault: &VaultArgs) -> CliResult<Env> {
        open_url_with(
            &self.store,
            &self.namespace,
            self.tenant_name(),
            vault.vault_key.clone(),
            false,
            &self.connect.settings(None)?,
        )
        .await
    }
}

/// Which backend a store is on.
#[derive(Clone, Debug)]
pub enum Backend {
    /// SQLite.
    Sqlite(SqliteStore),
    /// PostgreSQL.
    Postgres(PostgresStore),
    /// Redis.
    Redis(RedisStore),
}

/// An open store with its clock, randomness, tenant and vault key.
#[derive(Clone, Debug)]
pub struct Env {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The backend behind it.
    pub backend: Backend,
    /// The clock.
    pub clock: Arc<dyn Timer>,
    /// The random source.
    pub entropy: Arc<dyn Entropy>,
    /// The tenant of the command.
    pub tenant: TenantId,
    /// The vault key, when given.
    pub vault_key: Option<String>,
}

enum Url {
    Sqlite(PathBuf),
    Postgres(String),
    Redis(String),
    /// A Redis Cluster's seed nodes, each as `redis://[auth@]host:port`.
    RedisCluster(Vec<String>),
}

fn parse(url: &str) -> CliResult<Url> {
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        if path.is_empty() {
            return Err(CliError::usage(
                "invalid store: sqlite needs a path (sqlite:PATH)",
            ));
        }
        return Ok(Url::Sqlite(PathBuf::from(path)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Url::Postgres(url.to_owned()));
    }
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        return Ok(Url::Redis(url.to_owned()));
    }
    if let Some(rest) = url.strip_prefix("redis+cluster://") {
        // `redis+cluster://[auth@]h1:p1,h2:p2[/…]`, as `outboxkit_redis::RedisStore::connect`
        // reads it: each seed node gets the same credentials.
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
            return Err(CliError::usage(
                "invalid store: redis+cluster:// names no node (redis+cluster://host:port,host:port)",
            ));
        }
        return Ok(Url::RedisCluster(nodes));
    }
    Err(CliError::usage(
        "invalid store: use sqlite:PATH, postgres://…, redis://… (rediss:// for TLS) or redis+cluster://…",
    ))
}

/// Open `url`; `create` allows a new SQLite file (migrate, demo).
pub async fn open_url(
    url: &str,
    namespace: &str,
    tenant: &str,
    vault_key: Option<String>,
    create: bool,
) -> CliResult<Env> {
    open_url_with(
        url,
        namespace,
        tenant,
        vault_key,
        create,
        &Connect::default(),
    )
    .await
}

/// [`open_url`] with connection settings.
pub async fn open_url_with(
    url: &str,
    namespace: &str,
    tenant: &str,
    vault_key: Option<String>,
    create: bool,
    connect: &Connect,
) -> CliResult<Env> {
    let tenant = TenantId::new(tenant)?;
    let clock: Arc<dyn Timer> = Arc::new(SystemClock);
    let entropy: Arc<dyn Entropy> = Arc::new(OsEntropy);
    let unavailable =
        |e: outboxkit_core::Error| CliError::failed(format!("cannot open the store: {e}"));
    let parsed = parse(url)?;
    if connect.shards != 1 && !matches!(parsed, Url::Redis(_) | Url::RedisCluster(_)) {
        return Err(CliError::usage(
            "invalid input: --shards: only a redis store has shards",
        ));
    }
    let backend = match parsed {
        Url::Sqlite(path) => {
            if !create && !path.exists() {
                return Err(CliError::usage(format!(
                    "no database at {}: create it with `outbox migrate --store sqlite:{}`",
                    path.display(),
                    path.display()
                )));
            }
            let s = SqliteStore::open(SqliteConfig::new(path), clock.clone(), entropy.clone())
                .await
                .map_err(|e| match e.kind() {
                    outboxkit_core::ErrorKind::Misconfigured
                    | outboxkit_core::ErrorKind::InvalidInput => CliError::usage(e.to_string()),
                    _ => unavailable(e),
                })?;
            Backend::Sqlite(s)
        }
        Url::Postgres(u) => {
            let config = PostgresConfig {
                connect_timeout: connect.timeout,
                max_connections: connect.max_connections.unwrap_or(8),
                ..PostgresConfig::new(namespace)
            };
            config
                .validate()
                .map_err(|e| CliError::usage(format!("invalid input: --namespace: {e}")))?;
            let pool = config.connect_pool(&u).await.map_err(unavailable)?;
            let s = PostgresStore::new(pool, config, clock.clone(), entropy.clone())?;
            Backend::Postgres(s)
        }
        Url::RedisCluster(nodes) => {
            let config = redis_config(namespace, connect, None)?;
            let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
            let s = RedisStore::new_cluster(&nodes, config, Arc::new(SystemClock), entropy.clone())
                .await
                .map_err(|e| match e.kind() {
                    outboxkit_core::ErrorKind::Misconfigured => CliError::usage(e.to_string()),
                    _ => unavailable(e),
                })?;
            Backend::Redis(s)
        }
        Url::Redis(u) => {
            let tls_root_cert = match &connect.ca_cert {
                Some(path) => Some(std::fs::read(path).map_err(|e| {
                    CliError::usage(format!(
                        "invalid input: --ca-cert: cannot read {}: {e}",
                        path.display()
                    ))
                })?),
                None => None,
            };
            let config = redis_config(namespace, connect, tls_root_cert)?;
            let client = config.client(&u)?;
            config.probe(&client).await.map_err(unavailable)?;
            let s = RedisStore::new(client, config, clock.clone(), entropy.clone())
                .await
                .map_err(unavailable)?;
            Backend::Redis(s)
        }
    };
    let store: Arc<dyn Store> = match &backend {
        Backend::Sqlite(s) => Arc::new(s.clone()),
        Backend::Postgres(s) => Arc::new(s.clone()),
        Backend::Redis(s) => Arc::new(s.clone()),
    };
    Ok(Env {
        store,
        backend,
        clock,
        entropy,
        tenant,
        vault_key,
    })
}

/// The Redis configuration for `--namespace` (the prefix `{NAMESPACE}`), refused as bad
/// input (exit 2, as PostgreSQL refuses a bad schema name) before anything connects.
fn redis_config(
    namespace: &str,
    connect: &Connect,
    tls_root_cert: Option<Vec<u8>>,
) -> CliResult<RedisConfig> {
    if namespace.contains(['{', '}']) {
        return Err(CliError::usage(
            "invalid input: --namespace: must not contain `{` or `}` (the prefix adds its own hash tag)",
        ));
    }
    let config = RedisConfig {
        connection_timeout: connect.timeout,
        setup_timeout: connect.timeout,
        tls_root_cert,
        shards: connect.shards,
        ..RedisConfig::with_prefix(format!("{{{namespace}}}"))
    };
    config
        .validate()
        .map_err(|e| CliError::usage(format!("invalid input: --namespace: {e}")))?;
    Ok(config)
}

/// `migrate`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox migrate --store sqlite:./outbox.sqlite\n  outbox migrate --store postgres://postgres@127.0.0.1/app --namespace outbox\n  outbox migrate --store postgres://postgres@127.0.0.1/app --print-sql > V1__outbox.sql"
)]
pub struct MigrateArgs {
    #[command(flatten)]
    location: LocationArgs,
    /// Print the schema as one SQL script instead of applying it (for sqlx::migrate!,
    /// refinery, Flyway): it records what it applies the way `migrate` does. Connects to
    /// nothing and changes nothing; PostgreSQL and SQLite only.
    #[arg(long, conflicts_with = "json")]
    print_sql: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// `outbox migrate`.
pub async fn migrate(a: MigrateArgs) -> CliResult<()> {
    if a.print_sql {
        let url = a.location.store.as_str();
        let script = if url.starts_with("sqlite:") {
            outboxkit_sqlite::migration_script()
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            outboxkit_postgres::migration_script(&a.location.namespace)?
        } else if url.starts_with("redis://")
            || url.starts_with("rediss://")
            || url.starts_with("redis+cluster://")
        {
            return Err(CliError::usage(
                "invalid input: --print-sql: redis has no SQL schema (nothing to migrate)",
            ));
        } else {
            return Err(CliError::usage(
                "invalid input: store: use sqlite:PATH, postgres://… or redis://…",
            ));
        };
        return crate::util::emit(&script);
    }
    let env = open_url_with(
        &a.location.store,
        &a.location.namespace,
        "default",
        None,
        true,
        &a.location.connect.settings(None)?,
    )
    .await?;
    let (text, applied) = match &env.backend {
        Backend::Sqlite(s) => (
            format!("sqlite database ready at {}", s.path().display()),
            None,
        ),
        Backend::Postgres(s) => {
            let n = s.migrate().await?;
            (
                format!(
                    "postgres schema {} ready ({n} migrations applied)",
                    a.location.namespace
                ),
                Some(n),
            )
        }
        Backend::Redis(s) => (
            format!(
                "redis outbox ready under prefix {} (nothing to migrate)",
                s.prefix()
            ),
            None,
        ),
    };
    if a.json {
        crate::util::emit_json(&serde_json::json!({
            "store": env.describe(),
            "ready": true,
            "migrations_applied": applied,
        }))
    } else {
        crate::util::emit(&(text + "\n"))
    }
}

/// The vault for endpoint secrets, from `--vault-key` / `OUTBOX_VAULT_KEY`.
pub fn vault_from(env: &Env) -> CliResult<Arc<DynSecretVault>> {
    let key = env.vault_key.as_deref().ok_or_else(|| {
        CliError::usage("endpoint secrets are sealed with a key: set OUTBOX_VAULT_KEY (or --vault-key) to 64 hex digits; `outbox keygen` makes one")
    })?;
    Ok(Arc::new(AeadVault::from_hex(key, env.entropy.clone())?))
}

impl Env {
    /// A short description for humans (no credentials).
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sqlite(s) => format!("sqlite:{}", s.path().display()),
            Backend::Postgres(s) => format!("postgres (schema {})", s.config().schema),
            Backend::Redis(s) => format!("redis (prefix {})", s.prefix()),
        }
    }

    /// Enqueue the demo's events, each in the same transaction as the "order" row it
    /// describes; returns how many deliveries were written.
    pub async fn enqueue_demo_events(&self, n: u32) -> CliResult<u64> {
        let before = self.store.stats().await?.total();
        match &self.backend {
            Backend::Sqlite(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || -> CliResult<()> {
                    let mut conn = rusqlite::Connection::open(s.path()).map_err(sqlite_err)?;
                    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sqlite_err)?;
                    conn.execute_batch("create table if not exists demo_orders (id text primary key, created_at integer not null)")
                        .map_err(sqlite_err)?;
                    for i in 0..n {
                        let (order, message) = crate::demo::events::demo_event(i);
                        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(sqlite_err)?;
                        tx.execute("insert or ignore into demo_orders (id, created_at) values (?1, ?2)", rusqlite::params![order, i64::from(i)])
                            .map_err(sqlite_err)?;
                        s.enqueue_in(&tx, message)?;
                        tx.commit().map_err(sqlite_err)?;
                    }
                    s.notify();
                    Ok(())
                })
                .await
                .map_err(|e| CliError::failed(format!("the enqueue task failed: {e}")))??;
            }
            Backend::Postgres(s) => {
                let table = format!("{}.demo_orders", s.config().schema);
                sqlx::query(sqlx::AssertSqlSafe(format!("create table if not exists {table} (id text primary key, created_at bigint not null)")))
                    .execute(s.pool())
                    .await
                    .map_err(pg_err)?;
                for i in 0..n {
                    let (order, message) = crate::demo::events::demo_event(i);
                    let mut tx = s.pool().begin().await.map_err(pg_err)?;
                    sqlx::query(sqlx::AssertSqlSafe(format!("insert into {table} (id, created_at) values ($1, $2) on conflict do nothing")))
                        .bind(order)
                        .bind(i64::from(i))
                        .execute(&mut *tx)
                        .await
                        .map_err(pg_err)?;
                    s.enqueue_in(&mut tx, message).await?;
                    tx.commit().await.map_err(pg_err)?;
                }
            }
            Backend::Redis(s) => {
                let mut conn = s.connection();
                for i in 0..n {
                    let (order, message) = crate::demo::events::demo_event(i);
                    let mut pipe = redis::pipe();
                    pipe.atomic();
                    pipe.cmd("SET")
                        .arg(format!("{}:demo_order:{order}", s.prefix()))
                        .arg(i)
                        .ignore();
                    s.enqueue_in(&mut pipe, message)?;
                    let _: redis::Value = pipe
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| CliError::failed(format!("redis: {e}")))?;
                }
            }
        }
        Ok(self.store.stats().await?.total() - before)
    }
}

fn sqlite_err(e: rusqlite::Error) -> CliError {
    CliError::failed(format!("sqlite: {e}"))
}

fn pg_err(e: sqlx::Error) -> CliError {
    CliError::failed(format!(
        "postgres: {}",
        e.as_database_error().map_or_else(
            || "connection failed".to_owned(),
            |d| d.message().to_owned()
        )
    ))
}
