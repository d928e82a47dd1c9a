//! The schema: the migrations shipped with this crate, the runner behind
//! [`crate::PostgresStore::migrate`], the same migrations as SQL for users' own tools, and
//! the quoted table names every statement is built from.

use outboxkit_core::{Error, Result, Timestamp};
use sqlx::postgres::PgPool;
use sqlx::AssertSqlSafe;

use crate::config::PostgresConfig;
use crate::error::DbResult;
use crate::rows::ms;

mod enqueue_function;
pub(crate) use enqueue_function::Function;

/// The migrations shipped with this crate, applied in order by
/// [`crate::PostgresStore::migrate`]. `{schema}` in the text is replaced by the quoted schema
/// name.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("0001_init.sql")),
    (2, "hold", include_str!("0002_hold.sql")),
    (3, "ledger", include_str!("0003_ledger.sql")),
    (4, "fair_claim", include_str!("0004_fair_claim.sql")),
    (5, "tokens", include_str!("0005_tokens.sql")),
    (6, "history", include_str!("0006_history.sql")),
    (7, "narrow_queue", include_str!("0007_narrow_queue.sql")),
    (8, "enqueue_tokens", include_str!("0008_enqueue_tokens.sql")),
    (9, "hot_claim", include_str!("0009_hot_claim.sql")),
    (
        10,
        "endpoint_permits",
        include_str!("0010_endpoint_permits.sql"),
    ),
    (11, "fifo", include_str!("0011_fifo.sql")),
    (
        12,
        "endpoint_headers",
        include_str!("0012_endpoint_headers.sql"),
    ),
    (13, "event_types", include_str!("0013_event_types.sql")),
    (
        14,
        "consumer_pause",
        include_str!("0014_consumer_pause.sql"),
    ),
    (
        15,
        "attempt_detail",
        include_str!("0015_attempt_detail.sql"),
    ),
    (16, "console", include_str!("0016_console.sql")),
];

/// The quoted names of one outbox's schema and tables, substituted into every statement.
#[derive(Debug)]
pub(crate) struct Tables {
    pub messages: String,
    /// The hot queue: one narrow row per unfinished delivery.
    pub queue: String,
    /// (tenant, channel, target) once each, by a small id.
    pub groups: String,
    /// The history: finished deliveries (succeeded, dead), partitioned by completion day.
    pub history: String,
    /// Both as rows of version 6's columns (the view `delivery_rows`), usable wherever a
    /// table is (`{all} d`).
    pub all: String,
    pub attempts: String,
    pub endpoints: String,
    pub consumers: String,
    pub purge_cursor: String,
    /// The schema, quoted, for the partition maintenance function.
    pub schema: String,
}

impl Tables {
    /// The names for `schema` (already validated as a plain identifier).
    pub fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        Tables {
            messages: format!("{s}.messages"),
            queue: format!("{s}.queue"),
            groups: format!("{s}.groups"),
            history: format!("{s}.history"),
            all: format!("{s}.delivery_rows"),
            attempts: format!("{s}.attempts"),
            endpoints: format!("{s}.endpoints"),
            consumers: format!("{s}.consumers"),
            purge_cursor: format!("{s}.purge_cursor"),
            schema: s,
        }
    }

    /// Every table name a statement may use, for [`crate::sql::load`].
    pub fn names(&self) -> [(&'static str, &str); 10] {
        [
            ("messages", self.messages.as_str()),
            ("queue", self.queue.as_str()),
            ("groups", self.groups.as_str()),
            ("history", self.history.as_str()),
            ("all", self.all.as_str()),
            ("attempts", self.attempts.as_str()),
            ("endpoints", self.endpoints.as_str()),
            ("consumers", self.consumers.as_str()),
            ("purge_cursor", self.purge_cursor.as_str()),
            ("schema", self.schema.as_str()),
        ]
    }
}

/// Create the schema of `config` and apply every migration not yet applied, in order, in one
/// transaction under a per-schema advisory lock (see [`crate::PostgresStore::migrate`]).
pub(crate) async fn migrate(pool: &PgPool, config: &PostgresConfig, now: Timestamp) -> Result<u32> {
    let s = format!("\"{}\"", config.schema);
    let mut tx = pool.begin().await.db()?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("outbox migrate {}", config.schema))
        .execute(&mut *tx)
        .await
        .db()?;
    // Look first: CREATE SCHEMA checks the CREATE privilege on the database even when the
    // schema exists, and a role that owns only its schema must still be able to migrate.
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(&config.schema)
            .fetch_one(&mut *tx)
            .await
            .db()?;
    if !exists {
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {s}")))
            .execute(&mut *tx)
            .await
            .db()?;
    }
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE IF NOT EXISTS {s}.schema_migrations ( \
             version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)"
    )))
    .execute(&mut *tx)
    .await
    .db()?;
    let current: Option<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT max(version) FROM {s}.schema_migrations"
    )))
    .fetch_one(&mut *tx)
    .await
    .db()?;
    let current = current.unwrap_or(0);
    let latest = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > latest {
        return Err(Error::misconfigured(
            "schema",
            "the schema was migrated by a newer version of outboxkit-postgres",
        ));
    }
    // Every known migration not recorded yet, in order (not only those above the newest
    // recorded one), so a migration numbered below one already applied still runs.
    let done: Vec<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM {s}.schema_migrations"
    )))
    .fetch_all(&mut *tx)
    .await
    .db()?;
    let mut applied = 0;
    for (version, name, text) in MIGRATIONS.iter().filter(|m| !done.contains(&m.0)) {
        sqlx::raw_sql(AssertSqlSafe(text.replace("{schema}", &s)))
            .execute(&mut *tx)
            .await
            .db()?;
        // $1 version, $2 name, $3 applied at.
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {s}.schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)"
        )))
        .bind(version)
        .bind(name)
        .bind(ms(now))
        .execute(&mut *tx)
        .await
        .db()?;
        applied += 1;
    }
    // The SQL enqueue function, when its text (statement, limits, channel) changed.
    let function = Function::new(config)?;
    let comment: Option<String> =
        sqlx::query_scalar("SELECT obj_description(to_regprocedure($1), 'pg_proc')")
            .bind(format!("{s}.{}", enqueue_function::SIGNATURE))
            .fetch_one(&mut *tx)
            .await
            .db()?;
    if !function.is_installed(comment.as_deref()) {
        sqlx::raw_sql(AssertSqlSafe(function.text.as_str()))
            .execute(&mut *tx)
            .await
            .db()?;
    }
    tx.commit().await.db()?;
    Ok(applied)
}

/// One schema migration shipped with this crate, for applications that run migrations with
/// their own tooling (`sqlx::migrate!`, refinery, Flyway) instead of
/// [`crate::PostgresStore::migrate`]. See [`migrations`] and [`migration_script`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The version, counting from 1; applied in order.
    pub version: i32,
    /// A short name (`init`, …).
    pub name: &'static str,
    template: &'static str,
}

impl Migration {
    /// The migration's SQL for the outbox in `schema` (a plain identifier, as
    /// [`PostgresConfig::schema`]); `Misconfigured` for any other name.
    pub fn sql(&self, schema: &str) -> Result<String> {
        PostgresConfig::new(schema).validate()?;
        Ok(self.template.replace("{schema}", &format!("\"{schema}\"")))
    }
}

/// Every migration this crate ships, oldest first.
pub fn migrations() -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .map(|&(version, name, template)| Migration {
            version,
            name,
            template,
        })
        .collect()
}

/// One SQL script that brings an empty database (or one at an older version) to this
/// crate's schema in `schema`: it creates the schema and the `schema_migrations` table, then
/// applies each migration not yet recorded there and records it, exactly as
/// [`crate::PostgresStore::migrate`] does — so the two can be mixed, and `migrate()`
/// afterwards finds nothing to do. Run it in one transaction. `applied_at` comes from the
/// database's clock here (it is bookkeeping only; the outbox's own times come from its
/// `Clock`). The script ends with the SQL enqueue function `<schema>.enqueue(…)` for the
/// default limits and channel ([`enqueue_function_sql`] of `PostgresConfig::new(schema)`).
pub fn migration_script(schema: &str) -> Result<String> {
    PostgresConfig::new(schema).validate()?;
    let s = format!("\"{schema}\"");
    let mut out = format!(
        "-- outboxkit-postgres {} schema for {s}\n\
         CREATE SCHEMA IF NOT EXISTS {s};\n\
         CREATE TABLE IF NOT EXISTS {s}.schema_migrations (\n    \
             version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL);\n",
        env!("CARGO_PKG_VERSION")
    );
    for m in migrations() {
        let body = m.sql(schema)?;
        out.push_str(&format!(
            "\n-- migration {version}: {name}\n\
             DO $outbox_migration$ BEGIN\n\
             IF NOT EXISTS (SELECT 1 FROM {s}.schema_migrations WHERE version = {version}) THEN\n\
             EXECUTE $outbox_sql${body}$outbox_sql$;\n\
             INSERT INTO {s}.schema_migrations (version, name, applied_at)\n    \
                 VALUES ({version}, '{name}', (extract(epoch FROM clock_timestamp()) * 1000)::bigint);\n\
             END IF;\n\
             END $outbox_migration$;\n",
            version = m.version,
            name = m.name,
        ));
    }
    out.push_str("\n-- the SQL enqueue function (default limits and channel)\n");
    out.push_str(&Function::new(&PostgresConfig::new(schema))?.text);
    Ok(out)
}

/// The SQL enqueue function `<schema>.enqueue(tenant, topic, payload, ordering_key,
/// idempotency_key, available_at, headers, recipients)` for `config` (its schema, limits and
/// wake-up channel), for applications that install the schema with their own tooling:
/// [`crate::PostgresStore::migrate`] installs the same text, and replaces the function
/// whenever it changed. The README's "Enqueue from any language" shows how it is called.
pub fn enqueue_function_sql(config: &PostgresConfig) -> Result<String> {
    Ok(Function::new(config)?.text)
}
