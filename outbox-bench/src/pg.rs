//! PostgreSQL: connections, schemas, the raw baseline tables, and the enqueue scenarios
//! (one message per transaction at 1 and 8 writers; bulk in batches of 1,000).

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    Clock, Consumer, ConsumerName, DeliveryId, EndpointStore, MessageId, MessageStore, OsEntropy,
    Stopwatch, SystemClock, TopicFilter,
};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::common::{
    chunks, concurrently, err, message, payload, secs, unique, BenchResult, CONSUMER, TOPIC,
};
use crate::report::{per_second, Figure, Row, Target};
use crate::Ctx;

/// Session settings from `OUTBOX_BENCH_PG_SET="jit=off;work_mem=64MB"` (diagnosis).
fn env_settings() -> Vec<(String, String)> {
    std::env::var("OUTBOX_BENCH_PG_SET")
        .unwrap_or_default()
        .split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        })
        .collect()
}

/// A pool of at most `max` connections to `url`, named `outbox-bench` in `pg_stat_activity`,
/// with the server's default settings (plus the diagnosis knobs of the environment).
pub async fn pool(url: &str, max: u32) -> BenchResult<PgPool> {
    pool_with(url, max, Vec::new()).await
}

/// A pool for loading backlogs (not timed): JIT off, so the bulk enqueue's plan (see
/// BENCHMARKS.md) does not spend a second compiling each batch.
pub async fn loader_pool(url: &str) -> BenchResult<PgPool> {
    pool_with(url, 2, vec![("jit".to_owned(), "off".to_owned())]).await
}

async fn pool_with(
    url: &str,
    max: u32,
    mut settings: Vec<(String, String)>,
) -> BenchResult<PgPool> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|_| "OUTBOX_BENCH_POSTGRES_URL is not a postgres url".to_owned())?
        .application_name("outbox-bench");
    settings.extend(env_settings());
    // Diagnosis: `OUTBOX_BENCH_PG_EXPLAIN=<ms>` makes `auto_explain` log the plans of
    // statements slower than that to the server log (superuser only).
    let explain: Option<u32> = std::env::var("OUTBOX_BENCH_PG_EXPLAIN")
        .ok()
        .and_then(|v| v.parse().ok());
    PgPoolOptions::new()
        .max_connections(max)
        .min_connections(max)
        .acquire_timeout(Duration::from_secs(10))
        .after_connect(move |conn, _| {
            let settings = settings.clone();
            Box::pin(async move {
                for (k, v) in &settings {
                    sqlx::query("SELECT set_config($1, $2, false)")
                        .bind(k)
                        .bind(v)
                        .execute(&mut *conn)
                        .await?;
                }
                if let Some(ms) = explain {
                    let setup = format!(
                        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = {ms}; \
                         SET auto_explain.log_analyze = on; SET auto_explain.log_buffers = on"
                    );
                    sqlx::raw_sql(sqlx::AssertSqlSafe(setup))
                        .execute(conn)
                        .await?;
                }
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .map_err(|e| format!("postgres connect: {e}"))
}

/// Load `n` messages (one delivery each) into the migrated `schema` through a second store
/// on a [`loader_pool`]; not timed.
pub async fn load(ctx: &Ctx, schema: &str, n: usize) -> BenchResult<()> {
    let pool = loader_pool(&ctx.pg_url).await?;
    let loader = PostgresStore::new(
        pool.clone(),
        PostgresConfig::new(schema),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .map_err(err("postgres store"))?;
    crate::common::load(&loader, n).await?;
    analyze(&pool, schema, &["messages", "queue", "groups", "consumers"]).await?;
    // The peer scenarios count the writes that follow: the load's must be flushed first.
    crate::physical::force_flush(&pool).await;
    pool.close().await;
    Ok(())
}

/// Whether PostgreSQL answers at `url` (a short timeout), with its version.
pub async fn probe(url: &str) -> Option<String> {
    let options = PgConnectOptions::from_str(url).ok()?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options);
    let pool = tokio::time::timeout(Duration::from_secs(5), pool)
        .await
        .ok()?
        .ok()?;
    let v: String = sqlx::query_scalar("SHOW server_version")
        .fetch_one(&pool)
        .await
        .ok()?;
    pool.close().await;
    Some(v)
}

/// A fresh schema name: `bench_<what>_<hex>`.
pub fn schema_name(what: &str) -> String {
    format!("bench_{what}_{}", unique())
}

/// Run `body` with fresh schema names for the store and the raw baseline, then drop both
/// whatever happened.
pub async fn with_schemas<T, F, Fut>(ctx: &Ctx, what: &str, body: F) -> BenchResult<T>
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = BenchResult<T>>,
{
    let ours = schema_name(what);
    let raw = schema_name(&format!("{what}_raw"));
    let result = body(ours.clone(), raw.clone()).await;
    if let Ok(admin) = pool(&ctx.pg_url, 1).await {
        for s in [&ours, &raw] {
            let drop = format!("DROP SCHEMA IF EXISTS \"{s}\" CASCADE");
            if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(drop.to_string()))
                .execute(&admin)
                .await
            {
                eprintln!("could not drop schema {s}: {e}");
            }
        }
        admin.close().await;
    }
    result
}

/// A migrated store over `schema` on `pool`, with the benchmark consumer subscribed.
pub async fn store(pool: PgPool, schema: &str) -> BenchResult<PostgresStore> {
    store_with(pool, PostgresConfig::new(schema)).await
}

/// [`store`] with a configuration of its own.
pub async fn store_with(pool: PgPool, config: PostgresConfig) -> BenchResult<PostgresStore> {
    let store = PostgresStore::new(pool, config, Arc::new(SystemClock), Arc::new(OsEntropy))
        .map_err(err("postgres store"))?;
    store.migrate().await.map_err(err("migrate"))?;
    let consumer = Consumer {
        name: ConsumerName::new(CONSUMER).map_err(err("consumer"))?,
        filter: TopicFilter::all(),
        created_at: SystemClock.now(),
        status: outboxkit_core::ConsumerStatus::Active,
    };
    store
        .put_consumer(&consumer)
        .await
        .map_err(err("consumer"))?;
    Ok(store)
}

/// The raw baseline's tables: `messages`, the same columns and indexes as the outbox's, and
/// `jobs`, a minimal claimable deliveries table (primary key and a partial due index only).
pub async fn create_raw(pool: &PgPool, schema: &str) -> BenchResult<()> {
    let s = format!("\"{schema}\"");
    let ddl = format!(
        "CREATE SCHEMA {s}; \
         CREATE TABLE {s}.messages ( \
             id uuid PRIMARY KEY, tenant text COLLATE \"C\" NOT NULL, \
             topic text COLLATE \"C\" NOT NULL, payload bytea NOT NULL, \
             ordering_key text COLLATE \"C\", idempotency_key text COLLATE \"C\", \
             available_at bigint NOT NULL, headers text, cause text, created_at bigint NOT NULL); \
         CREATE UNIQUE INDEX ON {s}.messages (tenant, topic, idempotency_key) \
             WHERE idempotency_key IS NOT NULL; \
         CREATE INDEX ON {s}.messages (tenant, created_at); \
         CREATE TABLE {s}.jobs ( \
             seq bigserial NOT NULL, id uuid PRIMARY KEY, message_id uuid NOT NULL, \
             status text NOT NULL, attempts integer NOT NULL DEFAULT 0, \
             next_attempt_at bigint NOT NULL, lease_until bigint, claim_token uuid, \
             created_at bigint NOT NULL, updated_at bigint NOT NULL, completed_at bigint); \
         CREATE INDEX ON {s}.jobs (next_attempt_at, seq) \
             WHERE status IN ('pending', 'processing');"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(ddl.to_string()))
        .execute(pool)
        .await
        .map_err(|e| format!("raw schema: {e}"))?;
    Ok(())
}

/// Insert rows `range` into the raw tables (a message and a pending job each) in one
/// `INSERT … SELECT unnest(…)` statement: the bulk baseline, and the backlog of the
/// dispatch baseline.
pub async fn raw_bulk(
    pool: &PgPool,
    schema: &str,
    range: std::ops::Range<usize>,
) -> BenchResult<()> {
    let now = SystemClock.now();
    let ms = now.as_unix_millis();
    let n = range.len();
    let mut ids = Vec::with_capacity(n);
    let mut jobs = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    for i in range {
        ids.push(MessageId::generate(now, &OsEntropy).as_uuid());
        jobs.push(DeliveryId::generate(now, &OsEntropy).as_uuid());
        payloads.push(payload(i));
    }
    let s = format!("\"{schema}\"");
    let sql = format!(
        "WITH m AS ( \
           INSERT INTO {s}.messages (id, tenant, topic, payload, available_at, created_at) \
           SELECT u.id, 'default', $3::text, u.payload, $4::int8, $4::int8 \
             FROM unnest($1::uuid[], $2::bytea[]) AS u(id, payload)) \
         INSERT INTO {s}.jobs (id, message_id, status, next_attempt_at, created_at, updated_at) \
         SELECT u.job, u.id, 'pending', $4::int8, $4::int8, $4::int8 \
           FROM unnest($5::uuid[], $1::uuid[]) WITH ORDINALITY AS u(job, id, ord) \
          ORDER BY u.ord"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(ids)
        .bind(payloads)
        .bind(TOPIC)
        .bind(ms)
        .bind(jobs)
        .execute(pool)
        .await
        .map_err(|e| format!("raw bulk insert: {e}"))?;
    Ok(())
}

/// `ANALYZE` a schema's tables (after loading a backlog, as autovacuum would eventually).
pub async fn analyze(pool: &PgPool, schema: &str, tables: &[&str]) -> BenchResult<()> {
    for t in tables {
        sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE \"{schema}\".{t}")))
            .execute(pool)
            .await
            .map_err(|e| format!("analyze: {e}"))?;
    }
    Ok(())
}

/// How a writer of the enqueue scenario enqueues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `enqueue_in` in the writer's transaction, `NOTIFY` inside it (the default).
    InTx,
    /// `enqueue_in` without the `NOTIFY`, `store.notify()` after the commit.
    NotifyAfter,
    /// `store.enqueue`: the store's own statement, its `NOTIFY` sent after the commit.
    Own,
}

/// Enqueue, one message per transaction, at 1 and 8 writers, beside single-row inserts.
/// Ours and raw alternate `reps` times on the same tables; the best rate of each is kept.
pub async fn enqueue(ctx: &Ctx) -> Vec<Row> {
    let mut rows = Vec::new();
    let reps = ctx.reps();
    for (writers, full, mode) in [
        (1usize, 5_000usize, Mode::InTx),
        (8, 20_000, Mode::InTx),
        (8, 20_000, Mode::NotifyAfter),
        (8, 20_000, Mode::Own),
    ] {
        let n = ctx.scale.n(full);
        let in_tx = mode == Mode::InTx;
        let (key, scenario, target) = match mode {
            Mode::InTx => (
                format!("pg-enqueue-{writers}"),
                format!("postgres enqueue_in, 1 msg/tx, {writers} writer(s)"),
                if writers == 8 {
                    Target::MinRatio(0.75)
                } else {
                    Target::None
                },
            ),
            Mode::NotifyAfter => (
                format!("pg-enqueue-{writers}-notify-after"),
                format!("postgres enqueue_in, 1 msg/tx, {writers} writers, notify after commit"),
                Target::MinRatio(0.85),
            ),
            Mode::Own => (
                format!("pg-enqueue-{writers}-own"),
                format!("postgres store.enqueue, {writers} writers"),
                Target::MinRatio(0.85),
            ),
        };
        let r = with_schemas(ctx, "enq", |ours, raw| async move {
            let pool = pool(&ctx.pg_url, writers as u32).await?;
            let config = PostgresConfig {
                notify_in_transaction: in_tx,
                ..PostgresConfig::new(ours)
            };
            let store = store_with(pool.clone(), config).await?;
            create_raw(&pool, &raw).await?;
            let sql = format!(
                "INSERT INTO \"{raw}\".messages (id, tenant, topic, payload, ordering_key, \
                 idempotency_key, available_at, headers, cause, created_at) \
                 VALUES ($1::uuid, 'default', $2::text, $3::bytea, NULL, NULL, $4::int8, NULL, \
                         NULL, $4::int8)"
            );
            let (mut best_ours, mut best_raw) = (f64::MAX, f64::MAX);
            for _ in 0..reps {
                // Ours: the application's transaction around `enqueue_in` (the main path).
                let (p, st) = (pool.clone(), store.clone());
                let o = concurrently(n, writers, move |i| {
                    let (p, st) = (p.clone(), st.clone());
                    async move {
                        if mode == Mode::Own {
                            st.enqueue(message(i)).await.map_err(err("enqueue"))?;
                            return Ok(());
                        }
                        let mut tx = p.begin().await.map_err(|e| format!("begin: {e}"))?;
                        st.enqueue_in(&mut tx, message(i))
                            .await
                            .map_err(err("enqueue"))?;
                        tx.commit().await.map_err(|e| format!("commit: {e}"))?;
                        if !in_tx {
                            st.notify();
                        }
                        Ok(())
                    }
                })
                .await?;
                // Raw: the same message row, one INSERT per transaction.
                let (p, sql) = (pool.clone(), sql.clone());
                let r = concurrently(n, writers, move |i| {
                    let (p, sql) = (p.clone(), sql.clone());
                    async move {
                        let now = SystemClock.now();
                        let mut tx = p.begin().await.map_err(|e| format!("begin: {e}"))?;
                        sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
                            .bind(MessageId::generate(now, &OsEntropy).as_uuid())
                            .bind(TOPIC)
                            .bind(payload(i))
                            .bind(now.as_unix_millis())
                            .execute(&mut *tx)
                            .await
                            .map_err(|e| format!("insert: {e}"))?;
                        tx.commit().await.map_err(|e| format!("commit: {e}"))
                    }
                })
                .await?;
                best_ours = best_ours.min(o);
                best_raw = best_raw.min(r);
            }
            pool.close().await;
            Ok((best_ours, best_raw))
        })
        .await;
        rows.push(match r {
            Ok((o, b)) => Row::measured(
                &key,
                scenario,
                ctx.scale.label(n),
                Figure::rate(per_second(n as u64, o)),
                Some(Figure::rate(per_second(n as u64, b))),
                target,
                match mode {
                    Mode::InTx => format!(
                        "ours: begin + enqueue_in (message + 1 delivery + NOTIFY, the default) + \
                         commit; raw: begin + 1-row INSERT of the message + commit; best of {reps}"
                    ),
                    Mode::NotifyAfter => format!(
                        "ours: PostgresConfig::notify_in_transaction = false, begin + enqueue_in \
                         + commit + store.notify(); raw as above; best of {reps}"
                    ),
                    Mode::Own => format!(
                        "ours: store.enqueue (message + 1 delivery in one statement, its NOTIFY \
                         sent after the commit by the store's notifier); raw as above; best of \
                         {reps}"
                    ),
                },
            ),
            Err(e) => Row::not_run(&key, scenario, target, crate::report::Status::Error(e)),
        });
    }
    rows
}

/// Bulk enqueue in batches of 1,000, beside `INSERT … SELECT unnest(…)` of the same rows.
pub async fn bulk(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(100_000);
    let scenario = "postgres bulk enqueue, batches of 1,000";
    let reps = ctx.reps();
    let r = with_schemas(ctx, "bulk", |ours, raw| async move {
        let pool = pool(&ctx.pg_url, 2).await?;
        let store = store(pool.clone(), &ours).await?;
        create_raw(&pool, &raw).await?;
        let (mut best_ours, mut best_raw) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            let sw = Stopwatch::start();
            for c in chunks(n, 1000) {
                let batch = c.map(message).collect();
                store.enqueue_batch(batch).await.map_err(err("enqueue"))?;
            }
            best_ours = best_ours.min(secs(&sw));
            let sw = Stopwatch::start();
            for c in chunks(n, 1000) {
                raw_bulk(&pool, &raw, c).await?;
            }
            best_raw = best_raw.min(secs(&sw));
        }
        pool.close().await;
        Ok((best_ours, best_raw))
    })
    .await;
    match r {
        Ok((o, b)) => Row::measured(
            "pg-bulk",
            scenario,
            ctx.scale.label(n),
            Figure::rate(per_second(n as u64, o)),
            Some(Figure::rate(per_second(n as u64, b))),
            Target::MinRatio(0.8),
            format!(
                "ours: enqueue_batch (messages + 1 delivery each, own transaction); raw: one \
                 INSERT…SELECT unnest writing the same message rows and one job row each; best \
                 of {reps}"
            ),
        ),
        Err(e) => Row::not_run(
            "pg-bulk",
            scenario,
            Target::MinRatio(0.8),
            crate::report::Status::Error(e),
        ),
    }
}
