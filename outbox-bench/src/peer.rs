//! pgmq as a peer: the queue a user would pick instead of ours, measured in the same process
//! and round, interleaved with ours (ours, pgmq, ours, pgmq…; the median of the reps).
//!
//! pgmq is installed from its published SQL-only install (the `pgmq` crate's embedded
//! `pgmq.sql`, vendored as `src/pgmq.sql` with its source and license; schema `pgmq`, no
//! extension) and called through its SQL functions
//! (`pgmq.send`, `send_batch`, `read`, `archive`, `delete`) with sqlx, so both sides pay the
//! same driver. Every scenario uses a fresh queue (and a fresh schema of ours) and drops it.
//! The rows' ratio is ours ÷ pgmq for rates, pgmq ÷ ours for physical costs
//! ([`crate::physical`]).

use std::sync::Arc;

use outboxkit_core::{OperatorStore, OsEntropy, Stopwatch, SystemClock};
use outboxkit_dispatch::DispatcherConfig;
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use sqlx::postgres::PgPool;
use sqlx::{Row as _, ValueRef as _};
use tokio::sync::OnceCell;

use crate::common::{burn_down, chunks, err, payload, secs, unique, BenchResult, Progress};
use crate::pg::{pool, store, with_schemas};
use crate::pg_dispatch::noop_dispatcher;
use crate::physical::{cost_since, force_flush, snapshot_before, Cost, Scope};
use crate::quiet::CpuTicks;
use crate::report::{median, per_second, Figure, Row, Status, Target};
use crate::timed::Timed;
use crate::Ctx;

/// pgmq's visibility timeout of a read, seconds.
const VT_SECS: i32 = 30;
/// pgmq's read size (ours claims the relay's default batch, 100).
const READ: i32 = 100;
/// The relay's default connection cap (`relay --max-connections`).
const RELAY_CONNECTIONS: u32 = 8;

/// How a pgmq drain settles what it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// `pgmq.archive`: moves the rows to the queue's archive table (history kept, as ours).
    Archive,
    /// `pgmq.delete`: deletes them.
    Delete,
}

impl Settle {
    fn function(self) -> &'static str {
        match self {
            Settle::Archive => "archive",
            Settle::Delete => "delete",
        }
    }
}

/// pgmq's SQL-only install (pgmq 1.11.1, from the `pgmq` crate 0.33.7; PostgreSQL License).
const PGMQ_SQL: &str = include_str!("pgmq.sql");

/// Install pgmq's SQL once per process (idempotent across processes: an advisory lock, and
/// skipped when `pgmq.meta` exists, as the crate's installer did for a current install).
async fn install(url: &str) -> BenchResult<()> {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    INSTALLED
        .get_or_try_init(|| async {
            let p = pool(url, 1).await?;
            let r = install_in(&p)
                .await
                .map_err(|e| format!("pgmq install: {e}"));
            p.close().await;
            r
        })
        .await
        .map(|_| ())
}

async fn install_in(p: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = p.begin().await?;
    // The key the `pgmq` crate's installer locked on is its own; any constant will do here.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('outbox-bench pgmq install'))")
        .execute(&mut *tx)
        .await?;
    let present: bool = sqlx::query_scalar("SELECT to_regclass('pgmq.meta') IS NOT NULL")
        .fetch_one(&mut *tx)
        .await?;
    if !present {
        sqlx::raw_sql(PGMQ_SQL).execute(&mut *tx).await?;
    }
    tx.commit().await
}

/// A fresh pgmq queue; dropped when the body returns, whatever happened.
pub async fn with_queue<T, F, Fut>(ctx: &Ctx, body: F) -> BenchResult<T>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = BenchResult<T>>,
{
    install(&ctx.pg_url).await?;
    // pgmq lower-cases names into `pgmq.q_<name>` / `pgmq.a_<name>`.
    let queue = format!("bench_{}", unique());
    let admin = pool(&ctx.pg_url, 1).await?;
    sqlx::query("SELECT pgmq.create($1)")
        .bind(&queue)
        .execute(&admin)
        .await
        .map_err(|e| format!("pgmq.create: {e}"))?;
    let result = body(queue.clone()).await;
    if let Err(e) = sqlx::query("SELECT pgmq.drop_queue($1)")
        .bind(&queue)
        .execute(&admin)
        .await
    {
        eprintln!("could not drop pgmq queue {queue}: {e}");
    }
    admin.close().await;
    result
}

/// The queue's tables, the scope of its physical cost.
fn queue_scope(queue: &str) -> Scope {
    Scope::tables("pgmq", &[format!("q_{queue}"), format!("a_{queue}")])
}

/// Payload `i` as pgmq's message (jsonb; sent as text and cast by the server).
pub fn json(i: usize) -> String {
    String::from_utf8_lossy(&payload(i)).into_owned()
}

/// `pgmq.send_batch` of rows `range`.
pub async fn send_batch(
    pool: &PgPool,
    queue: &str,
    range: std::ops::Range<usize>,
) -> BenchResult<()> {
    let n = range.len() as i64;
    let msgs: Vec<String> = range.map(json).collect();
    let sent: i64 = sqlx::query_scalar("SELECT count(*) FROM pgmq.send_batch($1, $2::jsonb[])")
        .bind(queue)
        .bind(msgs)
        .fetch_one(pool)
        .await
        .map_err(|e| format!("pgmq.send_batch: {e}"))?;
    if sent != n {
        return Err(format!("pgmq.send_batch sent {sent} of {n}"));
    }
    Ok(())
}

/// What one drain measured.
#[derive(Debug)]
struct Drain {
    rate: f64,
    cost: Cost,
    /// Ours: the mean claim size (0 for pgmq, which reads 100 at a time).
    mean_claim: f64,
    /// CPU microseconds per delivered message during the drain: (client, PostgreSQL server).
    cpu: (f64, f64),
}

/// Ours: a backlog of `n` drained by a Dispatcher with the relay's defaults
/// (`DispatcherConfig::default()`, 8 connections) and the no-op handler.
async fn ours_drain(ctx: &Ctx, n: usize) -> BenchResult<Drain> {
    with_schemas(ctx, "peer", |ours, _| async move {
        let setup = pool(&ctx.pg_url, 1).await?;
        store(setup.clone(), &ours).await?;
        force_flush(&setup).await;
        setup.close().await;
        crate::pg::load(ctx, &ours, n).await?;
        let scope = Scope::schema(&ours);
        let before = snapshot_before(&ctx.pg_url, &scope).await?;
        let work = pool(&ctx.pg_url, RELAY_CONNECTIONS).await?;
        let st = PostgresStore::new(
            work.clone(),
            PostgresConfig::new(&ours),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .map_err(err("postgres store"))?;
        let timed = Arc::new(Timed::new(Arc::new(st.clone())));
        let progress = Progress::new(n as u64);
        let d = noop_dispatcher(timed.clone(), &progress, DispatcherConfig::default())?;
        let cpu = CpuTicks::now();
        let b = burn_down(&d, &progress, n as u64, None).await?;
        let cpu = CpuTicks::now().per_unit_since(&cpu, n as u64);
        drop(d);
        let (_, _, claims, completions) = timed.spent.totals();
        force_flush(&work).await;
        work.close().await;
        let cost = cost_since(&ctx.pg_url, &scope, &before, n as u64, claims + completions).await?;
        // Checked after the counts were read: this read is not part of the drain.
        let check = pool(&ctx.pg_url, 1).await?;
        let stats = PostgresStore::new(
            check.clone(),
            PostgresConfig::new(&ours),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .map_err(err("postgres store"))?
        .stats()
        .await
        .map_err(err("stats"))?;
        check.close().await;
        if stats.succeeded != n as u64 {
            return Err(format!("{} of {n} deliveries succeeded", stats.succeeded));
        }
        Ok(Drain {
            rate: b.rate,
            cost,
            mean_claim: b.mean_batch,
            cpu,
        })
    })
    .await
}

/// pgmq: a backlog of `n` sent in batches of 1,000, drained on one connection by
/// `read 100 (vt 30 s)` + `archive`/`delete` of the ids until a read comes back empty.
async fn pgmq_drain(ctx: &Ctx, n: usize, settle: Settle) -> BenchResult<Drain> {
    with_queue(ctx, |queue| async move {
        let setup = pool(&ctx.pg_url, 1).await?;
        for c in chunks(n, 1000) {
            send_batch(&setup, &queue, c).await?;
        }
        sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE pgmq.q_{queue}")))
            .execute(&setup)
            .await
            .map_err(|e| format!("analyze: {e}"))?;
        force_flush(&setup).await;
        setup.close().await;
        let scope = queue_scope(&queue);
        let before = snapshot_before(&ctx.pg_url, &scope).await?;
        let work = pool(&ctx.pg_url, 1).await?;
        let mut conn = work.acquire().await.map_err(|e| format!("acquire: {e}"))?;
        let settle_sql = format!(
            "SELECT count(*) FROM pgmq.{}($1, $2::int8[])",
            settle.function()
        );
        let (mut done, mut calls) = (0u64, 0u64);
        let cpu = CpuTicks::now();
        let sw = Stopwatch::start();
        loop {
            let rows = sqlx::query("SELECT msg_id, message FROM pgmq.read($1, $2, $3)")
                .bind(&queue)
                .bind(VT_SECS)
                .bind(READ)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| format!("pgmq.read: {e}"))?;
            calls += 1;
            if rows.is_empty() {
                break;
            }
            let mut ids = Vec::with_capacity(rows.len());
            for r in &rows {
                ids.push(r.get::<i64, _>(0));
                // The no-op handler sees the payload (jsonb's wire bytes, not parsed).
                let raw = r.try_get_raw(1).map_err(|e| format!("message: {e}"))?;
                std::hint::black_box(raw.is_null());
            }
            let settled: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(settle_sql.to_string()))
                .bind(&queue)
                .bind(&ids)
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| format!("pgmq.{}: {e}", settle.function()))?;
            calls += 1;
            done += settled as u64;
        }
        let rate = per_second(done, secs(&sw));
        let cpu = CpuTicks::now().per_unit_since(&cpu, done);
        drop(conn);
        force_flush(&work).await;
        work.close().await;
        if done != n as u64 {
            return Err(format!("pgmq settled {done} of {n}"));
        }
        let cost = cost_since(&ctx.pg_url, &scope, &before, done, calls).await?;
        Ok(Drain {
            rate,
            cost,
            mean_claim: 0.0,
            cpu,
        })
    })
    .await
}

/// The drains: ours, pgmq + archive, pgmq + delete, `reps` times interleaved.
struct Drains {
    ours: Vec<Drain>,
    archive: Vec<Drain>,
    delete: Vec<Drain>,
}

async fn drains(ctx: &Ctx, n: usize) -> BenchResult<Drains> {
    let mut d = Drains {
        ours: Vec::new(),
        archive: Vec::new(),
        delete: Vec::new(),
    };
    for _ in 0..ctx.reps() {
        d.ours.push(ours_drain(ctx, n).await?);
        d.archive.push(pgmq_drain(ctx, n, Settle::Archive).await?);
        d.delete.push(pgmq_drain(ctx, n, Settle::Delete).await?);
    }
    Ok(d)
}

fn median_of(v: &[Drain], f: impl Fn(&Drain) -> f64) -> f64 {
    median(&v.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
}

/// The reps' values of `f`, for a row's notes: `412 / 410 / 415`.
fn spread(v: &[Drain], f: impl Fn(&Drain) -> f64) -> String {
    v.iter()
        .map(|d| format!("{:.2}", f(d)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The drain rows: `pgmq-drain`, `pgmq-drain-delete`, `pg-wal-per-delivery`,
/// `pg-index-writes-per-delivery`, `pg-hot-ratio`.
pub async fn drain(ctx: &Ctx) -> Vec<Row> {
    let n = ctx.scale.n(50_000);
    let reps = ctx.reps();
    let size = ctx.scale.label(n);
    let d = match drains(ctx, n).await {
        Ok(d) => d,
        Err(e) => {
            return crate::catalog::BACKEND_ROWS
                .iter()
                .filter(|r| r.0 == "pgmq-drain")
                .map(|r| Row::not_run(r.1, r.2, r.3, Status::Error(e.clone())))
                .collect()
        }
    };
    let ours = median_of(&d.ours, |x| x.rate);
    let how = format!(
        "ours: Dispatcher with DispatcherConfig::default() (the relay's: batch 100, concurrency \
         64, handler concurrency 16, lease 40 s), {RELAY_CONNECTIONS} connections, no-op \
         handler; pgmq: one connection, read {READ} (vt {VT_SECS} s)"
    );
    let rate_row = |key: &str, what: &str, peer: &[Drain], target| {
        Row::measured(
            key,
            format!("postgres drain vs pgmq read + {what}, no-op handler"),
            size.clone(),
            Figure::rate(ours),
            Some(Figure::rate(median_of(peer, |x| x.rate))),
            target,
            format!(
                "{how} + {what} of the ids, until empty; ratio ours ÷ pgmq, median of {reps} \
                 interleaved (ours {} msg/s, mean claim {}; pgmq {} msg/s); CPU per delivery \
                 (µs, median; /proc ticks of the client process and of every postgres process): \
                 server ours {:.1}, pgmq {:.1}; client ours {:.1}, pgmq {:.1}",
                spread(&d.ours, |x| x.rate),
                spread(&d.ours, |x| x.mean_claim),
                spread(peer, |x| x.rate),
                median_of(&d.ours, |x| x.cpu.1),
                median_of(peer, |x| x.cpu.1),
                median_of(&d.ours, |x| x.cpu.0),
                median_of(peer, |x| x.cpu.0),
            ),
        )
    };
    let per = |v: &[Drain], f: fn(&crate::physical::PerDelivery) -> f64| {
        median_of(v, |x| f(&x.cost.per_delivery()))
    };
    let raw = |label: &str, v: &[Drain]| {
        let mid = &v[v.len() / 2];
        format!("{label} [{}]", mid.cost.describe())
    };
    let scoped = d
        .ours
        .iter()
        .chain(&d.archive)
        .all(|x| x.cost.per_delivery().scoped);
    let source = if scoped {
        "counted from the WAL of the scenario's own relations (pg_walinspect), full-page images \
         left out"
    } else {
        "pg_walinspect unavailable: cluster-wide pg_stat_wal deltas and the index formula"
    };
    let counts = format!(
        "{}; {}; {}",
        raw("ours", &d.ours),
        raw("pgmq archive", &d.archive),
        raw("pgmq delete", &d.delete)
    );
    let wal_row = Row::peer_cost(
        "pg-wal-per-delivery",
        "postgres WAL bytes per delivery, ours vs pgmq read + archive",
        size.clone(),
        Figure::per_delivery(per(&d.ours, |p| p.wal_bytes), "B/delivery"),
        Figure::per_delivery(per(&d.archive, |p| p.wal_bytes), "B/delivery"),
        Target::MinRatio(1.0),
        format!(
            "ratio pgmq ÷ ours (≥ 1: ours writes no more); {source}; median of {reps}; records \
             per delivery ours {:.2}, pgmq archive {:.2}, pgmq delete {:.2} (bytes {:.0}); {counts}",
            per(&d.ours, |p| p.wal_records),
            per(&d.archive, |p| p.wal_records),
            per(&d.delete, |p| p.wal_records),
            per(&d.delete, |p| p.wal_bytes),
        ),
    );
    let idx_row = Row::peer_cost(
        "pg-index-writes-per-delivery",
        "postgres index tuples written per delivery, ours vs pgmq read + archive",
        size.clone(),
        Figure::per_delivery(per(&d.ours, |p| p.index), "index tuples/delivery"),
        Figure::per_delivery(per(&d.archive, |p| p.index), "index tuples/delivery"),
        Target::MinRatio(1.0),
        format!(
            "ratio pgmq ÷ ours; B-tree leaf insertions in the WAL (formula (ins + non-HOT upd) × \
             indexes: ours {:.2}, pgmq archive {:.2}); heap tuples written per delivery ours \
             {:.2}, pgmq archive {:.2}, delete {:.2}; write transactions per delivery ours \
             {:.3}, pgmq archive {:.3}; client calls per delivery ours {:.3} (claims + \
             completions), pgmq {:.3}; median of {reps}",
            per(&d.ours, |p| p.index_formula),
            per(&d.archive, |p| p.index_formula),
            per(&d.ours, |p| p.heap),
            per(&d.archive, |p| p.heap),
            per(&d.delete, |p| p.heap),
            per(&d.ours, |p| p.commits),
            per(&d.archive, |p| p.commits),
            per(&d.ours, |p| p.calls),
            per(&d.archive, |p| p.calls),
        ),
    );
    vec![
        rate_row("pgmq-drain", "archive", &d.archive, Target::MinRatio(1.0)),
        rate_row(
            "pgmq-drain-delete",
            "delete",
            &d.delete,
            Target::MinRatio(0.9),
        ),
        wal_row,
        idx_row,
        hot_row(&d, &size, reps),
    ]
}

/// `pg-hot-ratio`: the HOT share of the updates of our most-updated table during the drain,
/// beside pgmq's queue table: from the WAL's heap records (exact) when it was read, else from
/// `pg_stat_user_tables`.
fn hot_row(d: &Drains, size: &str, reps: usize) -> Row {
    let key = "pg-hot-ratio";
    let scenario = "postgres HOT updates ÷ updates of the hot table during the drain";
    let target = Target::MinRatio(0.9);
    let share = |x: &Drain| {
        x.cost
            .wal_hot_ratio()
            .or_else(|| x.cost.hot_ratio().map(|h| h.1))
    };
    let m = |v: &[Drain]| median(&v.iter().filter_map(share).collect::<Vec<_>>());
    let stats = |v: &[Drain]| {
        v.iter()
            .filter_map(|x| x.cost.hot_ratio())
            .map(|(t, r)| format!("{t} {:.1} %", 100.0 * r))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(o) = m(&d.ours) else {
        return Row::not_run(
            key,
            scenario,
            target,
            Status::Error("no update was counted".into()),
        );
    };
    let mut row = Row::measured(
        key,
        scenario,
        size,
        Figure::percent(100.0 * o),
        m(&d.archive).map(|p| Figure::percent(100.0 * p)),
        target,
        format!(
            "ours: HOT_UPDATE ÷ (UPDATE + HOT_UPDATE) heap records of the most-updated table in \
             the WAL; baseline column: pgmq's queue table (read + archive); ratio = ours' HOT \
             share; median of {reps}; pg_stat_user_tables n_tup_hot_upd ÷ n_tup_upd: ours {}; \
             pgmq {}",
            stats(&d.ours),
            stats(&d.archive)
        ),
    );
    row.ratio = Some(o);
    row.status = crate::report::judge(target, Figure::percent(100.0 * o), row.ratio);
    row
}
