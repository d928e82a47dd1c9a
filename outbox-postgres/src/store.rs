//! [`PostgresStore`]: construction, migrations and enqueue (the trait impls of claims, the
//! ledger and endpoints live in `delivery.rs`, `ledger.rs` and `endpoints.rs`).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use outboxkit_core::{
    fanout, Clock, DeliveryId, Enqueued, Entropy, Error, ErrorKind, MessageId, MessageStore,
    NewMessage, OsEntropy, Result, SystemClock, ValidMessage, Wakeups,
};
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use uuid::Uuid;

use crate::config::PostgresConfig;
use crate::error::DbResult;
use crate::listen::Listener;
use crate::notify::Notifier;
use crate::rows::{self, get, ms};
use crate::sql::Sql;

/// The migrations shipped with this crate, applied in order by [`PostgresStore::migrate`].
/// `{schema}` in the text is replaced by the quoted schema name.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (2, "hold", include_str!("../migrations/0002_hold.sql")),
    (3, "ledger", include_str!("../migrations/0003_ledger.sql")),
    (5, "tokens", include_str!("../migrations/0005_tokens.sql")),
];

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
    pub sql: Sql,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
    pub wakeups: Wakeups,
    pub listener: Listener,
    pub notifier: Notifier,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("schema", &self.inner.config.schema)
            .field("channel", &self.inner.channel)
            .finish_non_exhaustive()
    }
}

/// One message ready to write: validated, with its id and the base of its delivery ids.
struct Prepared {
    valid: ValidMessage,
    id: MessageId,
    base: Uuid,
}

impl PostgresStore {
    /// A store on `pool` with `config`, reading time from `clock` and randomness (ids, claim
    /// tokens) from `entropy`. Validates the configuration and builds every statement once;
    /// connects to nothing. Call [`PostgresStore::migrate`] before first use.
    pub fn new(
        pool: PgPool,
        config: PostgresConfig,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Self> {
        config.validate()?;
        let channel = config.channel();
        let sql = Sql::new(&config.schema);
        let listener = Listener::new(&config);
        let notifier = Notifier::new(&config);
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool,
                channel,
                sql,
                clock,
                entropy,
                wakeups: Wakeups::new(),
                listener,
                notifier,
                config,
            }),
        })
    }

    /// Connect to `url` with a default pool and [`PostgresConfig::default`] (schema
    /// `outbox`), the system clock and the operating system's randomness.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresConfig::default()).await
    }

    /// Connect to `url` with a default pool and `config`, the system clock and the operating
    /// system's randomness.
    pub async fn connect_with(url: &str, config: PostgresConfig) -> Result<Self> {
        config.validate()?;
        let pool = PgPoolOptions::new().connect(url).await.db()?;
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
    pub async fn migrate(&self) -> Result<u32> {
        let s = &self.inner.sql.schema;
        let mut tx = self.inner.pool.begin().await.db()?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind(format!("outbox migrate {}", self.inner.config.schema))
            .execute(&mut *tx)
            .await
            .db()?;
        // Look first: CREATE SCHEMA checks the CREATE privilege on the database even when the
        // schema exists, and a role that owns only its schema must still be able to migrate.
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&self.inner.config.schema)
                .fetch_one(&mut *tx)
                .await
                .db()?;
        if !exists {
            sqlx::raw_sql(&format!("CREATE SCHEMA {s}"))
                .execute(&mut *tx)
                .await
                .db()?;
        }
        sqlx::raw_sql(&format!(
            "CREATE TABLE IF NOT EXISTS {s}.schema_migrations ( \
                 version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)"
        ))
        .execute(&mut *tx)
        .await
        .db()?;
        let current: Option<i32> =
            sqlx::query_scalar(&format!("SELECT max(version) FROM {s}.schema_migrations"))
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
        let done: Vec<i32> =
            sqlx::query_scalar(&format!("SELECT version FROM {s}.schema_migrations"))
                .fetch_all(&mut *tx)
                .await
                .db()?;
        let mut applied = 0;
        for (version, name, text) in MIGRATIONS.iter().filter(|m| !done.contains(&m.0)) {
            sqlx::raw_sql(&text.replace("{schema}", s))
                .execute(&mut *tx)
                .await
                .db()?;
            sqlx::query(&format!(
                "INSERT INTO {s}.schema_migrations (version, name, applied_at) \
                 VALUES ($1, $2, $3)"
            ))
            .bind(version)
            .bind(name)
            .bind(ms(self.inner.clock.now()))
            .execute(&mut *tx)
            .await
            .db()?;
            applied += 1;
        }
        tx.commit().await.db()?;
        Ok(applied)
    }

    fn prepare(&self, message: NewMessage) -> Result<Prepared> {
        let now = self.inner.clock.now();
        let valid = message.validate(&self.inner.config.limits, now)?;
        let row = fanout::message_row(&valid, now, &*self.inner.entropy);
        let base = DeliveryId::generate(now, &*self.inner.entropy).as_uuid();
        Ok(Prepared {
            valid,
            id: row.id,
            base,
        })
    }

    /// Write `message` and its fan-out deliveries on `conn`, inside the caller's transaction
    /// (pass `&mut *tx`): the event exists if and only if the transaction commits. One
    /// statement: the message, the deliveries to every matching consumer, active endpoint of
    /// the tenant and e-mail recipient, and one `NOTIFY` delivered at commit (unless
    /// [`PostgresConfig::notify_in_transaction`] is off). A duplicate
    /// idempotency key writes nothing and never raises an error that would abort the
    /// caller's transaction.
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        message: NewMessage,
    ) -> Result<Enqueued> {
        self.enqueue_on(conn, message, self.in_transaction_channel())
            .await
    }

    /// Enqueue on `conn`, with a `NOTIFY` on `channel` inside the statement when given.
    async fn enqueue_on(
        &self,
        conn: &mut PgConnection,
        message: NewMessage,
        channel: Option<&str>,
    ) -> Result<Enqueued> {
        let p = self.prepare(message)?;
        let v = &p.valid;
        let (hi, lo) = rows::split_base(p.base);
        let emails: Vec<&str> = v.emails.iter().map(|r| r.as_str()).collect();
        let row = sqlx::query(&self.inner.sql.enqueue_one)
            .bind(p.id.as_uuid())
            .bind(v.tenant.as_str())
            .bind(v.topic.as_str())
            .bind(&v.payload)
            .bind(v.ordering_key.as_ref().map(|k| k.as_str()))
            .bind(v.idempotency_key.as_ref().map(|k| k.as_str()))
            .bind(ms(v.available_at))
            .bind(rows::headers_to(&v.headers))
            .bind(rows::cause_to(v.cause.as_ref()))
            .bind(ms(self.inner.clock.now()))
            .bind(hi)
            .bind(lo)
            .bind(emails)
            .bind(channel)
            .fetch_one(&mut *conn)
            .await
            .db()?;
        let inserted: Option<Uuid> = get(&row, "inserted")?;
        let deliveries: i64 = get(&row, "deliveries")?;
        let existing: Option<Uuid> = get(&row, "existing")?;
        if inserted.is_some() {
            return Ok(Enqueued {
                message_id: p.id,
                deliveries: u32::try_from(deliveries).unwrap_or(u32::MAX),
                duplicate: false,
            });
        }
        let existing = match existing {
            Some(id) => id,
            None => self.find_duplicate(conn, v).await?,
        };
        duplicate_of(existing)
    }

    /// The earlier message with `v`'s idempotency key, read with a fresh snapshot: the row
    /// that made `ON CONFLICT DO NOTHING` skip may have committed after the statement began.
    async fn find_duplicate(&self, conn: &mut PgConnection, v: &ValidMessage) -> Result<Uuid> {
        let Some(key) = &v.idempotency_key else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a new message id collided with a stored one",
            ));
        };
        let id: Option<Uuid> = sqlx::query_scalar(&self.inner.sql.find_idempotent)
            .bind(v.tenant.as_str())
            .bind(v.topic.as_str())
            .bind(key.as_str())
            .fetch_optional(&mut *conn)
            .await
            .db()?;
        id.ok_or_else(|| {
            Error::new(
                ErrorKind::Conflict,
                "the idempotency key is held by a message that was removed meanwhile; try again",
            )
        })
    }

    /// Write many messages and their deliveries on `conn`, inside the caller's transaction,
    /// in one statement (`unnest` arrays: constant text whatever the batch size). Every
    /// message is validated before anything is written; a message with the idempotency key
    /// of an earlier one in the batch is a duplicate of it. One `NOTIFY` for the call, as for
    /// [`PostgresStore::enqueue_in`].
    pub async fn enqueue_batch_in(
        &self,
        conn: &mut PgConnection,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Enqueued>> {
        self.enqueue_batch_on(conn, messages, self.in_transaction_channel())
            .await
    }

    /// Enqueue a batch on `conn`, with a `NOTIFY` on `channel` inside the statement when
    /// given.
    async fn enqueue_batch_on(
        &self,
        conn: &mut PgConnection,
        messages: Vec<NewMessage>,
        channel: Option<&str>,
    ) -> Result<Vec<Enqueued>> {
        let prepared = messages
            .into_iter()
            .map(|m| self.prepare(m))
            .collect::<Result<Vec<_>>>()?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        // Within the batch, a repeated (tenant, topic, key) refers to its first occurrence.
        let mut first: HashMap<(&str, &str, &str), usize> = HashMap::new();
        let mut earlier: Vec<Option<usize>> = Vec::with_capacity(prepared.len());
        let mut sent: Vec<usize> = Vec::with_capacity(prepared.len());
        for (i, p) in prepared.iter().enumerate() {
            let v = &p.valid;
            let dup = v.idempotency_key.as_ref().and_then(|k| {
                let key = (v.tenant.as_str(), v.topic.as_str(), k.as_str());
                match first.get(&key) {
                    Some(&j) => Some(j),
                    None => {
                        first.insert(key, i);
                        None
                    }
                }
            });
            if dup.is_none() {
                sent.push(i);
            }
            earlier.push(dup);
        }

        let n = sent.len();
        let mut ids = Vec::with_capacity(n);
        let mut tenants = Vec::with_capacity(n);
        let mut topics = Vec::with_capacity(n);
        let mut payloads: Vec<&[u8]> = Vec::with_capacity(n);
        let mut okeys = Vec::with_capacity(n);
        let mut ikeys = Vec::with_capacity(n);
        let mut avail = Vec::with_capacity(n);
        let mut headers = Vec::with_capacity(n);
        let mut causes = Vec::with_capacity(n);
        let mut his = Vec::with_capacity(n);
        let mut los = Vec::with_capacity(n);
        let mut routes: std::collections::BTreeSet<(&str, &str)> = Default::default();
        let mut email_of: Vec<i64> = Vec::new();
        let mut email_to: Vec<&str> = Vec::new();
        for (ord, &i) in sent.iter().enumerate() {
            let p = &prepared[i];
            let v = &p.valid;
            ids.push(p.id.as_uuid());
            tenants.push(v.tenant.as_str());
            topics.push(v.topic.as_str());
            routes.insert((v.tenant.as_str(), v.topic.as_str()));
            payloads.push(&v.payload);
            okeys.push(v.ordering_key.as_ref().map(|k| k.as_str()));
            ikeys.push(v.idempotency_key.as_ref().map(|k| k.as_str()));
            avail.push(ms(v.available_at));
            headers.push(rows::headers_to(&v.headers));
            causes.push(rows::cause_to(v.cause.as_ref()));
            let (hi, lo) = rows::split_base(p.base);
            his.push(hi);
            los.push(lo);
            for r in &v.emails {
                email_of.push(ord as i64 + 1);
                email_to.push(r.as_str());
            }
        }
        let result = sqlx::query(&self.inner.sql.enqueue_many)
            .bind(ids)
            .bind(tenants)
            .bind(topics)
            .bind(payloads)
            .bind(okeys)
            .bind(ikeys)
            .bind(avail)
            .bind(headers)
            .bind(causes)
            .bind(his)
            .bind(los)
            .bind(email_of)
            .bind(email_to)
            .bind(ms(self.inner.clock.now()))
            .bind(channel)
            .bind(routes.iter().map(|r| r.0).collect::<Vec<_>>())
            .bind(routes.iter().map(|r| r.1).collect::<Vec<_>>())
            .fetch_all(&mut *conn)
            .await
            .db()?;
        if result.len() != n {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "the batch enqueue returned an unexpected number of rows",
            ));
        }

        let mut out: Vec<Option<Enqueued>> = vec![None; prepared.len()];
        for (row, &i) in result.iter().zip(&sent) {
            let inserted: bool = get(row, "inserted")?;
            let deliveries: i64 = get(row, "deliveries")?;
            let existing: Option<Uuid> = get(row, "existing")?;
            out[i] = Some(if inserted {
                Enqueued {
                    message_id: prepared[i].id,
                    deliveries: u32::try_from(deliveries).unwrap_or(u32::MAX),
                    duplicate: false,
                }
            } else {
                let id = match existing {
                    Some(id) => id,
                    None => self.find_duplicate(conn, &prepared[i].valid).await?,
                };
                duplicate_of(id)?
            });
        }
        // `earlier[i]` always names a smaller index, already resolved.
        let mut done: Vec<Enqueued> = Vec::with_capacity(out.len());
        for (e, earlier) in out.into_iter().zip(earlier) {
            let e = match (e, earlier) {
                (Some(e), _) => e,
                (None, Some(j)) => Enqueued {
                    message_id: done[j].message_id,
                    deliveries: 0,
                    duplicate: true,
                },
                (None, None) => {
                    return Err(Error::new(
                        ErrorKind::Unexpected,
                        "a batch message was neither written nor a duplicate",
                    ))
                }
            };
            done.push(e);
        }
        Ok(done)
    }
}

fn duplicate_of(existing: Uuid) -> Result<Enqueued> {
    Ok(Enqueued {
        message_id: MessageId::from_uuid(existing).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "a stored id is not valid").with_source(e)
        })?,
        deliveries: 0,
        duplicate: true,
    })
}

impl PostgresStore {
    fn in_transaction_channel(&self) -> Option<&str> {
        self.inner
            .config
            .notify_in_transaction
            .then_some(self.inner.channel.as_str())
    }

    /// Wake the dispatchers of this outbox in every process: this process's listeners at
    /// once, the others through one `NOTIFY` sent from a background connection (coalesced
    /// with concurrent calls). Call it after committing a transaction that used
    /// [`PostgresStore::enqueue_in`] when [`PostgresConfig::notify_in_transaction`] is off.
    /// Outside a tokio runtime only this process's listeners are woken.
    pub fn notify(&self) {
        self.inner.wakeups.wake();
        self.inner
            .notifier
            .request(&self.inner.pool, &self.inner.channel);
    }

    /// After an own-transaction enqueue committed something: wake this process's listeners
    /// now, and other processes' through one coalesced `NOTIFY` sent after the commit.
    async fn notify_committed(&self, conn: &mut PgConnection) -> Result<()> {
        self.inner.wakeups.wake();
        if !self
            .inner
            .notifier
            .request(&self.inner.pool, &self.inner.channel)
        {
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(&self.inner.channel)
                .execute(&mut *conn)
                .await
                .db()?;
        }
        Ok(())
    }
}

#[async_trait]
impl MessageStore for PostgresStore {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        let mut conn = self.inner.pool.acquire().await.db()?;
        // One statement: atomic without an explicit transaction, committed on return.
        let e = self.enqueue_on(&mut conn, message, None).await?;
        if e.deliveries > 0 {
            self.notify_committed(&mut conn).await?;
        }
        Ok(e)
    }

    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        let mut conn = self.inner.pool.acquire().await.db()?;
        let out = self.enqueue_batch_on(&mut conn, messages, None).await?;
        if out.iter().any(|e| e.deliveries > 0) {
            self.notify_committed(&mut conn).await?;
        }
        Ok(out)
    }
}

/// One schema migration shipped with this crate, for applications that run migrations with
/// their own tooling (`sqlx::migrate!`, refinery, Flyway) instead of
/// [`PostgresStore::migrate`]. See [`migrations`] and [`migration_script`].
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
/// [`PostgresStore::migrate`] does — so the two can be mixed, and `migrate()` afterwards
/// finds nothing to do. Run it in one transaction. `applied_at` comes from the database's
/// clock here (it is bookkeeping only; the outbox's own times come from its `Clock`).
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
    Ok(out)
}
