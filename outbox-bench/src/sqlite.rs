//! SQLite: enqueue (one message per transaction) and the dispatch burn-down, beside raw
//! rusqlite loops on an equivalent table in a file of its own (WAL, `synchronous=NORMAL`,
//! the same page cache and checkpoint interval as the store's writer).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    Clock, Consumer, ConsumerName, DeliveryId, EndpointStore, MessageId, MessageStore, OsEntropy,
    Stopwatch, SystemClock, TopicFilter,
};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::{params, Connection, TransactionBehavior};

use crate::common::load;
use crate::common::{
    burn_down, err, message, payload, secs, unique, BenchResult, BurnDown, Progress,
};
use crate::common::{CONSUMER, TOPIC};
use crate::pg_dispatch::{burn_config, noop_dispatcher, BATCH, CONCURRENCY};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::timed::Timed;
use crate::Ctx;

/// Two fresh database paths (ours, raw) in the scratch folder; removed by [`cleanup`].
pub(crate) fn paths(ctx: &Ctx, what: &str) -> BenchResult<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(&ctx.scratch).map_err(|e| format!("scratch folder: {e}"))?;
    let u = unique();
    Ok((
        ctx.scratch.join(format!("{what}-{u}-ours.db")),
        ctx.scratch.join(format!("{what}-{u}-raw.db")),
    ))
}

pub(crate) fn cleanup(paths: &[&Path]) {
    for p in paths {
        for suffix in ["", "-wal", "-shm"] {
            let mut f = p.as_os_str().to_owned();
            f.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(f));
        }
    }
}

/// The store on `path` with the benchmark consumer subscribed.
pub(crate) async fn store(path: &Path) -> BenchResult<SqliteStore> {
    let store = SqliteStore::open(
        SqliteConfig::new(path),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .map_err(err("sqlite open"))?;
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

/// The raw database: the outbox's message table and a minimal jobs table.
pub(crate) fn open_raw(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA cache_size = -65536; \
         PRAGMA wal_autocheckpoint = 4000; \
         CREATE TABLE IF NOT EXISTS messages ( \
             id TEXT NOT NULL PRIMARY KEY, tenant TEXT NOT NULL, topic TEXT NOT NULL, \
             payload BLOB NOT NULL, ordering_key TEXT, idempotency_key TEXT, \
             available_at INTEGER NOT NULL, headers TEXT, cause TEXT, \
             created_at INTEGER NOT NULL); \
         CREATE UNIQUE INDEX IF NOT EXISTS messages_idem \
             ON messages (tenant, topic, idempotency_key) WHERE idempotency_key IS NOT NULL; \
         CREATE INDEX IF NOT EXISTS messages_tenant ON messages (tenant, created_at); \
         CREATE TABLE IF NOT EXISTS jobs ( \
             seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, \
             message_id TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL, \
             next_attempt_at INTEGER NOT NULL, lease_until INTEGER, claim_token TEXT, \
             created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, completed_at INTEGER); \
         CREATE INDEX IF NOT EXISTS jobs_due ON jobs (next_attempt_at, seq) \
             WHERE status IN ('pending', 'processing');",
    )?;
    Ok(conn)
}

pub(crate) const RAW_INSERT: &str =
    "INSERT INTO messages (id, tenant, topic, payload, available_at, \
     created_at) VALUES (?1, 'default', ?2, ?3, ?4, ?4)";

/// Run a blocking closure off the executor.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> rusqlite::Result<T> + Send + 'static,
) -> BenchResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task: {e}"))?
        .map_err(|e| format!("raw sqlite: {e}"))
}

/// One message per transaction: `store.enqueue` beside `BEGIN IMMEDIATE; INSERT; COMMIT`,
/// alternating `reps` times on fresh files; the best rate of each is kept.
pub async fn enqueue(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(20_000);
    let reps = ctx.reps();
    let scenario = "sqlite enqueue, 1 msg/tx, 1 writer";
    let r = async {
        let (mut best_ours, mut best_raw) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            let (ours, raw) = paths(ctx, "enq")?;
            let result = async {
                let store = store(&ours).await?;
                let sw = Stopwatch::start();
                for i in 0..n {
                    store.enqueue(message(i)).await.map_err(err("enqueue"))?;
                }
                let ours_secs = secs(&sw);
                drop(store);
                let raw_path = raw.clone();
                let raw_secs = blocking(move || {
                    let mut conn = open_raw(&raw_path)?;
                    let sw = Stopwatch::start();
                    for i in 0..n {
                        let now = SystemClock.now();
                        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                        tx.prepare_cached(RAW_INSERT)?.execute(params![
                            MessageId::generate(now, &OsEntropy).to_string(),
                            TOPIC,
                            payload(i),
                            now.as_unix_millis()
                        ])?;
                        tx.commit()?;
                    }
                    Ok(secs(&sw))
                })
                .await?;
                Ok::<_, String>((ours_secs, raw_secs))
            }
            .await;
            cleanup(&[&ours, &raw]);
            let (o, r) = result?;
            best_ours = best_ours.min(o);
            best_raw = best_raw.min(r);
        }
        Ok::<_, String>((best_ours, best_raw))
    }
    .await;
    match r {
        Ok((o, b)) => Row::measured(
            "sqlite-enqueue",
            scenario,
            ctx.scale.label(n),
            Figure::rate(per_second(n as u64, o)),
            Some(Figure::rate(per_second(n as u64, b))),
            Target::None,
            format!(
                "ours: store.enqueue (message + 1 delivery, own tx on the writer thread); raw: \
                 1-row INSERT per BEGIN IMMEDIATE…COMMIT on one thread; best of {reps}"
            ),
        ),
        Err(e) => Row::not_run("sqlite-enqueue", scenario, Target::None, Status::Error(e)),
    }
}

/// Load `n` pending jobs into the raw database in one transaction (not timed).
pub(crate) fn raw_load(conn: &mut Connection, n: usize) -> rusqlite::Result<()> {
    let now = SystemClock.now();
    let ms = now.as_unix_millis();
    let tx = conn.transaction()?;
    {
        let mut m = tx.prepare_cached(RAW_INSERT)?;
        let mut j = tx.prepare_cached(
            "INSERT INTO jobs (id, message_id, status, attempts, next_attempt_at, created_at, \
             updated_at) VALUES (?1, ?2, 'pending', 0, ?3, ?3, ?3)",
        )?;
        for i in 0..n {
            let id = MessageId::generate(now, &OsEntropy).to_string();
            m.execute(params![id, TOPIC, payload(i), ms])?;
            j.execute(params![
                DeliveryId::generate(now, &OsEntropy).to_string(),
                id,
                ms
            ])?;
        }
    }
    tx.commit()
}

/// What the raw loop did: jobs completed, seconds in claim and in ack transactions.
#[derive(Debug, Default)]
pub(crate) struct RawBurn {
    pub(crate) done: u64,
    claim_secs: f64,
    ack_secs: f64,
    batches: u64,
}

/// The raw claim + ack loop in batches of [`BATCH`]. Never inlined: `sqlite-counts` counts
/// the instructions inside it by name (callgrind `--toggle-collect`).
#[inline(never)]
pub(crate) fn raw_burn(conn: &mut Connection) -> rusqlite::Result<RawBurn> {
    let claim = "UPDATE jobs SET status = 'processing', attempts = attempts + 1, \
         claim_token = lower(hex(randomblob(16))), lease_until = ?1, next_attempt_at = ?1, \
         updated_at = ?2 \
         WHERE seq IN (SELECT seq FROM jobs WHERE status IN ('pending', 'processing') \
                         AND next_attempt_at <= ?2 ORDER BY next_attempt_at, seq LIMIT ?3) \
         RETURNING id, claim_token, (SELECT payload FROM messages m WHERE m.id = message_id)";
    let ack = "UPDATE jobs SET status = 'succeeded', completed_at = ?1, claim_token = NULL, \
         lease_until = NULL, updated_at = ?1 \
         WHERE id = ?2 AND claim_token = ?3 AND status = 'processing'";
    let mut out = RawBurn::default();
    loop {
        let now = SystemClock.now().as_unix_millis();
        let sw = Stopwatch::start();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let batch: Vec<(String, String)> = {
            let mut stmt = tx.prepare_cached(claim)?;
            let rows = stmt.query_map(params![now + 40_000, now, BATCH], |r| {
                std::hint::black_box(r.get_ref(2)?.as_blob()?.len());
                Ok((r.get(0)?, r.get(1)?))
            })?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        tx.commit()?;
        out.claim_secs += secs(&sw);
        if batch.is_empty() {
            return Ok(out);
        }
        let now = SystemClock.now().as_unix_millis();
        let sw = Stopwatch::start();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(ack)?;
            for (id, token) in &batch {
                out.done += stmt.execute(params![now, id, token])? as u64;
            }
        }
        tx.commit()?;
        out.ack_secs += secs(&sw);
        out.batches += 1;
    }
}

/// One burn-down of ours on a fresh file: the result and the time breakdown.
async fn ours_once(ctx: &Ctx, n: usize) -> BenchResult<(BurnDown, String)> {
    let (ours, _) = paths(ctx, "disp")?;
    let result = async {
        let store = store(&ours).await?;
        load(&store, n).await?;
        let timed = Arc::new(Timed::new(Arc::new(store.clone())));
        let progress = Progress::new(n as u64);
        let d = noop_dispatcher(timed.clone(), &progress, burn_config())?;
        let b = burn_down(&d, &progress, n as u64, None).await?;
        let stats = store.stats().await.map_err(err("stats"))?;
        if stats.succeeded != n as u64 {
            return Err(format!("{} of {n} deliveries succeeded", stats.succeeded));
        }
        let why = timed.spent.breakdown(b.secs);
        Ok((b, why))
    }
    .await;
    cleanup(&[&ours]);
    result
}

/// One run of the raw loop on a fresh file: the rate and the time breakdown.
async fn raw_once(ctx: &Ctx, n: usize) -> BenchResult<(f64, String)> {
    let (_, raw) = paths(ctx, "disp")?;
    let raw_path = raw.clone();
    let result = blocking(move || {
        let mut conn = open_raw(&raw_path)?;
        raw_load(&mut conn, n)?;
        let sw = Stopwatch::start();
        let r = raw_burn(&mut conn)?;
        Ok((r, secs(&sw)))
    })
    .await;
    cleanup(&[&raw]);
    let (r, raw_secs) = result?;
    if r.done != n as u64 {
        return Err(format!("the raw loop completed {} of {n}", r.done));
    }
    let per = |x: f64| 1000.0 * x / r.batches.max(1) as f64;
    let why = format!(
        "claim tx {:.0} % ({:.2} ms/batch), ack tx {:.0} % ({:.2} ms/batch)",
        100.0 * r.claim_secs / raw_secs,
        per(r.claim_secs),
        100.0 * r.ack_secs / raw_secs,
        per(r.ack_secs)
    );
    Ok((per_second(n as u64, raw_secs), why))
}

/// The burn-down beside the raw claim + ack loop, alternating `reps` times; best of each.
pub async fn dispatch(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(50_000);
    let scenario = "sqlite dispatch burn-down, no-op handler";
    let target = Target::MinRatio(0.5);
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
        best.zip(best_raw)
            .ok_or_else(|| "no repetition ran".to_owned())
    }
    .await;
    match r {
        Ok(((b, why), (raw, raw_why))) => Row::measured(
            "sqlite-dispatch",
            scenario,
            ctx.scale.label(n),
            Figure::rate(b.rate),
            Some(Figure::rate(raw)),
            target,
            format!(
                "batch {BATCH}, concurrency {CONCURRENCY} (mean claim {:.0}); ours: {why}; raw \
                 (UPDATE…RETURNING claim of 100 + per-row acks in one tx, one thread): \
                 {raw_why}; best of {reps}",
                b.mean_batch
            ),
        ),
        Err(e) => Row::not_run("sqlite-dispatch", scenario, target, Status::Error(e)),
    }
}
