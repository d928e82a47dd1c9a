//! PostgreSQL dispatch: the burn-down beside a raw `FOR UPDATE SKIP LOCKED` claim + `unnest`
//! completion loop, the enqueue → handler latency with NOTIFY, and the dispatcher's peak RSS
//! at a small and a large backlog (in a child process).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{Clock, DynStore, MessageStore, NewMessage, Stopwatch, SystemClock};
use outboxkit_dispatch::{Dispatcher, DispatcherConfig, HandlerResult};
use outboxkit_postgres::PostgresStore;
use sqlx::postgres::PgListener;
use sqlx::Row as _;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::common::{
    burn_down, chunks, err, noop, secs, BenchResult, BurnDown, Progress, CONSUMER, TOPIC,
};
use crate::pg::{analyze, create_raw, pool, raw_bulk, store, with_schemas};
use crate::report::{per_second, percentile, Figure, Row, Status, Target};
use crate::timed::Timed;
use crate::Ctx;

/// The claim size of ours and of the baseline.
pub const BATCH: u32 = 100;
/// The dispatcher's global and per-handler concurrency in the burn-downs.
pub const CONCURRENCY: usize = 200;

/// The dispatcher configuration of the burn-downs.
pub fn burn_config() -> DispatcherConfig {
    DispatcherConfig {
        batch_size: BATCH,
        concurrency: CONCURRENCY,
        handler_concurrency: CONCURRENCY,
        ..DispatcherConfig::default()
    }
}

/// A dispatcher with the no-op handler and `progress` as its observer.
pub fn noop_dispatcher(
    store: Arc<DynStore>,
    progress: &Arc<Progress>,
    config: DispatcherConfig,
) -> BenchResult<Dispatcher> {
    Dispatcher::builder(store)
        .handler(CONSUMER, "*", noop)
        .config(config)
        .observer(progress.clone())
        .build()
        .map_err(err("dispatcher"))
}

/// The raw claim: `FOR UPDATE SKIP LOCKED` of up to `$2` due jobs, leased with fresh tokens,
/// returned with their payloads.
fn raw_claim_sql(s: &str) -> String {
    format!(
        "WITH picked AS ( \
           SELECT id FROM \"{s}\".jobs \
            WHERE status IN ('pending', 'processing') AND next_attempt_at <= $1::int8 \
            ORDER BY next_attempt_at, seq LIMIT $2::int8 FOR UPDATE SKIP LOCKED), \
         claimed AS ( \
           UPDATE \"{s}\".jobs j SET status = 'processing', attempts = j.attempts + 1, \
                  claim_token = gen_random_uuid(), lease_until = $3::int8, \
                  next_attempt_at = $3::int8, updated_at = $1::int8 \
             FROM picked WHERE j.id = picked.id \
           RETURNING j.id, j.claim_token, j.message_id) \
         SELECT c.id, c.claim_token, m.payload FROM claimed c \
           JOIN \"{s}\".messages m ON m.id = c.message_id"
    )
}

/// The raw completion: every (id, token) of the batch succeeded, in one `unnest` UPDATE.
fn raw_complete_sql(s: &str) -> String {
    format!(
        "UPDATE \"{s}\".jobs j SET status = 'succeeded', completed_at = $1::int8, \
                claim_token = NULL, lease_until = NULL, updated_at = $1::int8 \
           FROM unnest($2::uuid[], $3::uuid[]) AS u(id, token) \
          WHERE j.id = u.id AND j.claim_token = u.token AND j.status = 'processing'"
    )
}

/// What the raw loop did: jobs completed, seconds in claims, seconds in completions.
#[derive(Debug, Default)]
struct RawBurn {
    done: u64,
    claim_secs: f64,
    complete_secs: f64,
    batches: u64,
}

/// The raw claim + complete loop on one connection until nothing is due.
async fn raw_burn(pool: &sqlx::PgPool, schema: &str) -> BenchResult<RawBurn> {
    let claim = raw_claim_sql(schema);
    let complete = raw_complete_sql(schema);
    let mut conn = pool.acquire().await.map_err(|e| format!("acquire: {e}"))?;
    let mut out = RawBurn::default();
    loop {
        let now = SystemClock.now().as_unix_millis();
        let sw = Stopwatch::start();
        let rows = sqlx::query(sqlx::AssertSqlSafe(claim.to_string()))
            .bind(now)
            .bind(i64::from(BATCH))
            .bind(now + 40_000)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| format!("raw claim: {e}"))?;
        out.claim_secs += secs(&sw);
        if rows.is_empty() {
            return Ok(out);
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut tokens = Vec::with_capacity(rows.len());
        for r in &rows {
            ids.push(r.get::<Uuid, _>(0));
            tokens.push(r.get::<Uuid, _>(1));
            // The no-op handler sees the payload.
            std::hint::black_box(r.get::<&[u8], _>(2));
        }
        let sw = Stopwatch::start();
        let n = sqlx::query(sqlx::AssertSqlSafe(complete.to_string()))
            .bind(SystemClock.now().as_unix_millis())
            .bind(ids)
            .bind(tokens)
            .execute(&mut *conn)
            .await
            .map_err(|e| format!("raw complete: {e}"))?
            .rows_affected();
        out.complete_secs += secs(&sw);
        out.done += n;
        out.batches += 1;
    }
}

/// One burn-down of ours on a fresh schema: the rate and the time breakdown.
async fn ours_once(ctx: &Ctx, n: usize) -> BenchResult<(BurnDown, String)> {
    with_schemas(ctx, "disp", |ours, _| async move {
        let pool = pool(&ctx.pg_url, 4).await?;
        let store = store(pool.clone(), &ours).await?;
        crate::pg::load(ctx, &ours, n).await?;
        let timed = Arc::new(Timed::new(Arc::new(store.clone())));
        let progress = Progress::new(n as u64);
        let d = noop_dispatcher(timed.clone(), &progress, burn_config())?;
        let b = burn_down(&d, &progress, n as u64, None).await?;
        let stats = store.stats().await.map_err(err("stats"))?;
        if stats.succeeded != n as u64 {
            return Err(format!("{} of {n} deliveries succeeded", stats.succeeded));
        }
        pool.close().await;
        let why = timed.spent.breakdown(b.secs);
        Ok((b, why))
    })
    .await
}

/// One run of the raw loop on fresh tables: the rate and the time breakdown.
async fn raw_once(ctx: &Ctx, n: usize) -> BenchResult<(f64, String)> {
    with_schemas(ctx, "disp", |_, raw| async move {
        let pool = pool(&ctx.pg_url, 4).await?;
        create_raw(&pool, &raw).await?;
        for c in chunks(n, 1000) {
            raw_bulk(&pool, &raw, c).await?;
        }
        analyze(&pool, &raw, &["messages", "jobs"]).await?;
        let sw = Stopwatch::start();
        let r = raw_burn(&pool, &raw).await?;
        let raw_secs = secs(&sw);
        if r.done != n as u64 {
            return Err(format!("the raw loop completed {} of {n}", r.done));
        }
        pool.close().await;
        let per = |x: f64| 1000.0 * x / r.batches.max(1) as f64;
        let why = format!(
            "claim {:.0} % ({:.2} ms/call), complete {:.0} % ({:.2} ms/call)",
            100.0 * r.claim_secs / raw_secs,
            per(r.claim_secs),
            100.0 * r.complete_secs / raw_secs,
            per(r.complete_secs)
        );
        Ok((per_second(n as u64, raw_secs), why))
    })
    .await
}

/// Burn down a backlog with a no-op handler, beside the raw loop; ours and raw alternate
/// `reps` times on fresh schemas, and the best rate of each is kept.
pub async fn dispatch(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(100_000);
    let scenario = "postgres dispatch burn-down, no-op handler";
    let target = Target::MinRatio(0.8);
    let reps = ctx.reps();
    let r = async {
        let mut best: Option<(BurnDown, String)> = None;
        let mut best_raw: Option<(f64, String)> = None;
        for _ in 0..reps {
            let o = ours_once(ctx, n).await?;
            if best.as_ref().is_none_or(|b| o.0.rate > b.0.rate) {
                best = Some(o);
            }
            let r = raw_once(ctx, n).await?;
            if best_raw.as_ref().is_none_or(|b| r.0 > b.0) {
                best_raw = Some(r);
            }
        }
        match (best, best_raw) {
            (Some(o), Some(r)) => Ok((o, r)),
            _ => Err("no repetition ran".to_owned()),
        }
    }
    .await;
    match r {
        Ok(((b, why), (raw, raw_why))) => Row::measured(
            "pg-dispatch",
            scenario,
            ctx.scale.label(n),
            Figure::rate(b.rate),
            Some(Figure::rate(raw)),
            target,
            format!(
                "batch {BATCH}, concurrency {CONCURRENCY} (mean claim {:.0}); ours: {why}; raw \
                 (claim 100 SKIP LOCKED + unnest completion, one connection): {raw_why}; best \
                 of {reps}",
                b.mean_batch
            ),
        ),
        Err(e) => Row::not_run("pg-dispatch", scenario, target, Status::Error(e)),
    }
}

/// Latency samples, filled by the handler.
#[derive(Debug, Default)]
struct Samples {
    micros: Mutex<Vec<f64>>,
    seen: Notify,
}

/// Enqueue → handler start on an idle dispatcher woken by NOTIFY, beside the raw
/// insert + `pg_notify` → `LISTEN` round trip.
pub async fn latency(ctx: &Ctx) -> Vec<Row> {
    let n = ctx.scale.n(1000).max(100);
    let warmup = 10;
    let spacing = Duration::from_millis(10);
    let keys = ["pg-latency-p50", "pg-latency-p99"];
    let targets = [Target::MaxMillis(2.0), Target::MaxMillis(10.0)];
    let r = with_schemas(ctx, "lat", |ours, raw| async move {
        let pool = pool(&ctx.pg_url, 4).await?;
        let store = store(pool.clone(), &ours).await?;
        let epoch = Arc::new(Stopwatch::start());
        let samples = Arc::new(Samples::default());
        let (e, s) = (epoch.clone(), samples.clone());
        let d = Dispatcher::builder(Arc::new(store.clone()))
            .handler(CONSUMER, "*", move |_ctx, m: outboxkit_core::Message| {
                let (e, s) = (e.clone(), s.clone());
                async move {
                    let now = e.elapsed().as_micros() as f64;
                    let sent = m.json().ok().and_then(|v| v["t_us"].as_f64());
                    if let Some(t) = sent {
                        s.micros
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(now - t);
                    }
                    s.seen.notify_one();
                    HandlerResult::Ok
                }
            })
            .build()
            .map_err(err("dispatcher"))?;
        let stop = Arc::new(Notify::new());
        let stop2 = stop.clone();
        let run = tokio::spawn(async move { d.run(async move { stop2.notified().await }).await });
        tokio::time::sleep(Duration::from_millis(500)).await; // LISTEN is up, the loop idle
        let mut enqueue_ms = Vec::with_capacity(n);
        for i in 0..warmup + n {
            if i == warmup {
                samples
                    .micros
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clear();
            }
            let t = epoch.elapsed().as_micros() as f64;
            store
                .enqueue(NewMessage::new(TOPIC, serde_json::json!({ "t_us": t })))
                .await
                .map_err(err("enqueue"))?;
            if i >= warmup {
                enqueue_ms.push((epoch.elapsed().as_micros() as f64 - t) / 1000.0);
            }
            tokio::time::timeout(Duration::from_secs(5), samples.seen.notified())
                .await
                .map_err(|_| "an event was not handled within 5 s".to_owned())?;
            tokio::time::sleep(spacing).await;
        }
        stop.notify_one();
        run.await
            .map_err(|e| format!("dispatcher task: {e}"))?
            .map_err(err("dispatcher run"))?;
        let ours: Vec<f64> = samples
            .micros
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|us| us / 1000.0)
            .collect();
        let raw_ms = raw_notify_latency(&pool, &raw, n, warmup, spacing).await?;
        pool.close().await;
        Ok((ours, raw_ms, enqueue_ms))
    })
    .await;
    match r {
        Ok((ours, raw, enq)) => [50.0, 99.0]
            .iter()
            .zip(keys.iter().zip(targets))
            .map(|(p, (key, target))| {
                let o = percentile(&ours, *p).unwrap_or(f64::NAN);
                let b = percentile(&raw, *p);
                let mut row = Row::measured(
                    key,
                    format!("postgres enqueue → handler start, p{p}"),
                    format!("{} events", ours.len()),
                    Figure::millis(o),
                    b.map(Figure::millis),
                    target,
                    format!(
                        "idle dispatcher woken by NOTIFY (poll 1 s), events 10 ms apart; of \
                         which the enqueue call (its commit) p{p} {:.2} ms; baseline: raw \
                         INSERT + pg_notify + commit → LISTEN receipt",
                        percentile(&enq, *p).unwrap_or(f64::NAN)
                    ),
                );
                row.ratio = None;
                row
            })
            .collect(),
        Err(e) => keys
            .iter()
            .zip(targets)
            .map(|(k, t)| {
                Row::not_run(
                    k,
                    "postgres enqueue → handler start",
                    t,
                    Status::Error(e.clone()),
                )
            })
            .collect(),
    }
}

/// The raw floor of the latency: insert + `pg_notify` in one transaction → the listener
/// receives the notification.
async fn raw_notify_latency(
    pool: &sqlx::PgPool,
    raw: &str,
    n: usize,
    warmup: usize,
    spacing: Duration,
) -> BenchResult<Vec<f64>> {
    create_raw(pool, raw).await?;
    let channel = format!("{raw}_wake");
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(|e| format!("listener: {e}"))?;
    listener
        .listen(&channel)
        .await
        .map_err(|e| format!("listen: {e}"))?;
    let insert = format!(
        "INSERT INTO \"{raw}\".messages (id, tenant, topic, payload, available_at, created_at) \
         VALUES ($1::uuid, 'default', $2::text, $3::bytea, $4::int8, $4::int8)"
    );
    let mut out = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let sw = Stopwatch::start();
        let now = SystemClock.now();
        let mut tx = pool.begin().await.map_err(|e| format!("begin: {e}"))?;
        sqlx::query(sqlx::AssertSqlSafe(insert.to_string()))
            .bind(outboxkit_core::MessageId::generate(now, &outboxkit_core::OsEntropy).as_uuid())
            .bind(TOPIC)
            .bind(crate::common::payload(i))
            .bind(now.as_unix_millis())
            .execute(&mut *tx)
            .await
            .map_err(|e| format!("insert: {e}"))?;
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(&channel)
            .execute(&mut *tx)
            .await
            .map_err(|e| format!("notify: {e}"))?;
        tx.commit().await.map_err(|e| format!("commit: {e}"))?;
        tokio::time::timeout(Duration::from_secs(5), listener.recv())
            .await
            .map_err(|_| "no notification within 5 s".to_owned())?
            .map_err(|e| format!("recv: {e}"))?;
        if i >= warmup {
            out.push(sw.elapsed().as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(spacing).await;
    }
    Ok(out)
}

/// What the child process reports (one JSON line on stdout).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ChildReport {
    /// Peak resident set (`VmHWM`), KiB.
    pub vmhwm_kib: u64,
    /// Seconds of the burn-down.
    pub secs: f64,
    /// Deliveries that succeeded.
    pub succeeded: u64,
    /// The mean number of items per completion call.
    #[serde(default)]
    pub mean_completion: f64,
    /// The largest completion call.
    #[serde(default)]
    pub largest_completion: u64,
}

/// `VmHWM` of this process, KiB.
pub fn vmhwm_kib() -> Option<u64> {
    parse_vmhwm(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The `VmHWM:` line of a `/proc/<pid>/status` text, in KiB.
pub fn parse_vmhwm(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The child: burn down `count` pending deliveries in `schema`, then report `VmHWM`.
pub async fn child_rss(url: &str, schema: &str, count: u64) -> BenchResult<ChildReport> {
    let pool = pool(url, 4).await?;
    let store = PostgresStore::new(
        pool,
        outboxkit_postgres::PostgresConfig::new(schema),
        Arc::new(SystemClock),
        Arc::new(outboxkit_core::OsEntropy),
    )
    .map_err(err("postgres store"))?;
    let timed = Arc::new(Timed::new(Arc::new(store)));
    let progress = Progress::new(count);
    let d = noop_dispatcher(timed.clone(), &progress, burn_config())?;
    let b = burn_down(&d, &progress, count, None).await?;
    let (mean_completion, largest_completion) = timed.spent.completion_sizes();
    Ok(ChildReport {
        vmhwm_kib: vmhwm_kib().ok_or("VmHWM is not readable")?,
        secs: b.secs,
        succeeded: progress.succeeded(),
        mean_completion,
        largest_completion,
    })
}

/// Run the child on a loaded schema and read its report.
async fn spawn_child(ctx: &Ctx, schema: &str, count: usize) -> BenchResult<ChildReport> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = tokio::process::Command::new(exe)
        .arg("--child-rss")
        .arg(schema)
        .arg(count.to_string())
        .env("OUTBOX_BENCH_POSTGRES_URL", &ctx.pg_url)
        .output()
        .await
        .map_err(|e| format!("child: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "child failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).map_err(|e| format!("child report: {e}"))
}

/// Peak RSS of a dispatcher process burning down a small and a large backlog.
pub async fn rss(ctx: &Ctx) -> Row {
    let (small, large) = match ctx.scale.size {
        Some(n) => (10_000, n),
        None if ctx.scale.quick => (10_000, 100_000),
        None => (10_000, 1_000_000),
    };
    let scenario = "postgres dispatcher peak RSS, small vs large backlog";
    let target = Target::Flat(0.10);
    let mut peaks = Vec::new();
    for count in [small, large] {
        let r = with_schemas(ctx, "rss", |ours, _raw| async move {
            let pool = pool(&ctx.pg_url, 1).await?;
            store(pool.clone(), &ours).await?;
            pool.close().await;
            crate::pg::load(ctx, &ours, count).await?;
            spawn_child(ctx, &ours, count).await
        })
        .await;
        match r {
            Ok(c) => peaks.push(c),
            Err(e) => return Row::not_run("pg-rss", scenario, target, Status::Error(e)),
        }
    }
    let mib = |c: &ChildReport| c.vmhwm_kib as f64 / 1024.0;
    let label = |n: usize| crate::common::count_label(n);
    Row::measured(
        "pg-rss",
        scenario,
        format!("{} vs {}", label(small), label(large)),
        Figure::mib(mib(&peaks[1])),
        Some(Figure::mib(mib(&peaks[0]))),
        target,
        format!(
            "ours = VmHWM of the dispatcher process burning down {} pending, baseline column = \
             the same at {}; burn-down {:.0} / {:.0} msg/s; completion calls of {:.0} / {:.0} \
             items on average, largest {} / {}",
            label(large),
            label(small),
            per_second(peaks[1].succeeded, peaks[1].secs),
            per_second(peaks[0].succeeded, peaks[0].secs),
            peaks[1].mean_completion,
            peaks[0].mean_completion,
            peaks[1].largest_completion,
            peaks[0].largest_completion,
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmhwm_is_read_from_proc_status() {
        let text = "Name:\tx\nVmPeak:\t  200 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(parse_vmhwm(text), Some(12345));
        assert_eq!(parse_vmhwm("Name:\tx\n"), None);
    }

    #[test]
    fn the_child_report_round_trips() {
        let c = ChildReport {
            vmhwm_kib: 1,
            secs: 2.0,
            succeeded: 3,
            mean_completion: 100.0,
            largest_completion: 120,
        };
        let back: ChildReport = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back.succeeded, 3);
    }
}
