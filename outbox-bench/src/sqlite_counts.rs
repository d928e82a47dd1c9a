//! SQLite counts that machine load does not move, ours beside the raw rusqlite loops of
//! `sqlite.rs` (issue 34):
//!
//! - **WAL frames** per enqueue (one message per transaction) and per delivered message
//!   (claim of 100 + completion of 100, as the dispatcher completes: succeeded, with the
//!   attempt record). The WAL is truncated by `PRAGMA wal_checkpoint(TRUNCATE)` on a
//!   connection of the bench before each phase; its size afterwards is the frames written
//!   (`(size − 32) / (page size + 24)`). Each phase writes fewer frames than the
//!   automatic checkpoint interval (4000), so no checkpoint restarts the WAL inside it
//!   (checked).
//! - **Instructions** per delivered message: the writer thread's (ours: the store's writer
//!   thread, everything it runs; raw: the thread running the raw claim + ack loop), counted
//!   by `valgrind --tool=callgrind` in a child process (`--child-sqlite-instr`) on a file the
//!   bench loaded beforehand, with collection only inside that thread's function. Two sizes
//!   are run and the difference is divided by the difference in messages, so opening the
//!   file and the last, empty claim cancel out. Skipped when `valgrind` is not installed
//!   (`apt-get install valgrind`). Run alone: `cargo xtask bench --only sqlite-counts`.
//!   `OUTBOX_BENCH_KEEP_CALLGRIND=DIR` keeps each child's profile in `DIR`.
//!
//! Each row's ratio is raw ÷ ours (above 1: ours costs less).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    AttemptOutcome, AttemptRecord, ClaimRequest, Clock, Completion, ConsumerName, DeliveryStore,
    MessageStore, OsEntropy, SystemClock, Verdict,
};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use rusqlite::{params, Connection, TransactionBehavior};

use crate::common::{err, load, message, payload, BenchResult};
use crate::common::{CONSUMER, TOPIC};
use crate::pg_dispatch::BATCH;
use crate::report::{Figure, Row, Status, Target};
use crate::sqlite::{cleanup, open_raw, paths, raw_burn, raw_load, store, RAW_INSERT};
use crate::Ctx;

/// Messages enqueued (and then delivered) for the WAL counts: about 10 frames each today,
/// below the 4000-frame automatic checkpoint.
const WAL_N: usize = 300;

/// The two sizes of the instruction count (their difference is what is counted).
const INSTR_N: (usize, usize) = (300, 900);

/// The lease of the counting claims.
const LEASE: Duration = Duration::from_secs(60);

/// The automatic checkpoint interval of both sides (pages).
const AUTOCHECKPOINT: u64 = 4000;

/// The three count rows.
pub async fn counts(ctx: &Ctx) -> Vec<Row> {
    let mut rows = match wal(ctx).await {
        Ok(w) => wal_rows(&w),
        Err(e) => vec![
            Row::not_run(
                "sqlite-wal-frames-per-enqueue",
                "sqlite WAL frames per enqueue",
                Target::MinRatio(0.5),
                Status::Error(e.clone()),
            ),
            Row::not_run(
                "sqlite-wal-frames-per-delivery",
                "sqlite WAL frames per delivery",
                Target::None,
                Status::Error(e),
            ),
        ],
    };
    rows.push(instructions(ctx).await);
    rows
}

/// WAL frames per message of each phase.
#[derive(Debug, Default)]
struct Wal {
    ours_enqueue: f64,
    raw_enqueue: f64,
    ours_delivery: f64,
    raw_delivery: f64,
}

fn wal_rows(w: &Wal) -> Vec<Row> {
    let unit = "frames/delivery";
    vec![
        Row::peer_cost(
            "sqlite-wal-frames-per-enqueue",
            "sqlite WAL frames per enqueue, 1 msg/tx (ratio raw ÷ ours)",
            format!("{WAL_N}"),
            Figure::per_delivery(w.ours_enqueue, unit),
            Figure::per_delivery(w.raw_enqueue, unit),
            Target::MinRatio(0.5),
            "ours: store.enqueue (message + 1 delivery); raw: 1-row INSERT per \
             BEGIN IMMEDIATE…COMMIT; WAL growth after wal_checkpoint(TRUNCATE)",
        ),
        Row::peer_cost(
            "sqlite-wal-frames-per-delivery",
            "sqlite WAL frames per delivered message (ratio raw ÷ ours)",
            format!("{WAL_N}"),
            Figure::per_delivery(w.ours_delivery, unit),
            Figure::per_delivery(w.raw_delivery, unit),
            Target::None,
            format!(
                "ours: claim {BATCH} + complete_many {BATCH} (succeeded, attempt record); raw: \
                 UPDATE…RETURNING claim of {BATCH} + per-row acks in one tx"
            ),
        ),
    ]
}

/// Frames in the WAL of the database at `path`.
fn wal_frames(path: &Path) -> BenchResult<u64> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let conn = Connection::open(path).map_err(|e| format!("open: {e}"))?;
    let page: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .map_err(|e| format!("page_size: {e}"))?;
    let page = u64::try_from(page).map_err(|e| format!("page_size: {e}"))?;
    let frames = size.saturating_sub(32) / (page + 24);
    if frames + 100 >= AUTOCHECKPOINT {
        return Err(format!(
            "{frames} frames: an automatic checkpoint may have restarted the WAL"
        ));
    }
    Ok(frames)
}

/// Empty the WAL of the database at `path` (every other connection idle).
fn truncate_wal(path: &Path) -> BenchResult<()> {
    let conn = Connection::open(path).map_err(|e| format!("open: {e}"))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| format!("busy_timeout: {e}"))?;
    let busy: i64 = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .map_err(|e| format!("checkpoint: {e}"))?;
    if busy != 0 {
        return Err("the WAL checkpoint was blocked".into());
    }
    Ok(())
}

/// The frames a phase writes, per message.
fn per(path: &Path, n: usize) -> BenchResult<f64> {
    Ok(wal_frames(path)? as f64 / n as f64)
}

async fn wal(ctx: &Ctx) -> BenchResult<Wal> {
    let (ours, raw) = paths(ctx, "counts")?;
    let r = async {
        let mut w = Wal::default();
        let store = store(&ours).await?;
        truncate_wal(&ours)?;
        for i in 0..WAL_N {
            store.enqueue(message(i)).await.map_err(err("enqueue"))?;
        }
        w.ours_enqueue = per(&ours, WAL_N)?;
        truncate_wal(&ours)?;
        let done = deliver_all(&store).await?;
        if done != WAL_N {
            return Err(format!("ours delivered {done} of {WAL_N}"));
        }
        w.ours_delivery = per(&ours, WAL_N)?;
        drop(store);

        let mut conn = open_raw(&raw).map_err(|e| format!("raw: {e}"))?;
        truncate_wal(&raw)?;
        for i in 0..WAL_N {
            let now = SystemClock.now();
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| format!("raw: {e}"))?;
            tx.prepare_cached(RAW_INSERT)
                .and_then(|mut s| {
                    s.execute(params![
                        outboxkit_core::MessageId::generate(now, &OsEntropy).to_string(),
                        TOPIC,
                        payload(i),
                        now.as_unix_millis()
                    ])
                })
                .map_err(|e| format!("raw: {e}"))?;
            tx.commit().map_err(|e| format!("raw: {e}"))?;
        }
        w.raw_enqueue = per(&raw, WAL_N)?;
        raw_load(&mut conn, WAL_N).map_err(|e| format!("raw: {e}"))?;
        truncate_wal(&raw)?;
        let burn = raw_burn(&mut conn).map_err(|e| format!("raw: {e}"))?;
        if burn.done != WAL_N as u64 {
            return Err(format!("raw delivered {} of {WAL_N}", burn.done));
        }
        w.raw_delivery = per(&raw, WAL_N)?;
        Ok(w)
    }
    .await;
    cleanup(&[&ours, &raw]);
    r
}

/// The counted claim: what the dispatcher asks for with one handler.
fn claim_request() -> BenchResult<ClaimRequest> {
    let consumer = ConsumerName::new(CONSUMER).map_err(err("consumer"))?;
    Ok(ClaimRequest::new(BATCH, LEASE).handler(consumer, 10))
}

/// Claim batches of [`BATCH`] and complete each as the dispatcher does (succeeded, with
/// its attempt record) until nothing is due; the deliveries completed.
async fn deliver_all(store: &SqliteStore) -> BenchResult<usize> {
    let request = claim_request()?;
    let mut done = 0;
    loop {
        let claimed = store.claim(&request).await.map_err(err("claim"))?;
        if claimed.is_empty() {
            return Ok(done);
        }
        let now = SystemClock.now();
        let items: Vec<_> = claimed
            .iter()
            .map(|c| {
                let attempt = AttemptRecord {
                    detail: None,
                    started_at: now,
                    finished_at: now,
                    outcome: AttemptOutcome::Succeeded,
                    status_code: None,
                    excerpt: None,
                };
                (
                    c.lease.clone(),
                    Completion {
                        verdict: Verdict::Succeeded,
                        attempt: Some(attempt),
                    },
                )
            })
            .collect();
        for r in store.complete_many(&items).await.map_err(err("complete"))? {
            r.map_err(err("complete"))?;
            done += 1;
        }
    }
}

// ---- instructions ----

/// The function callgrind counts in, per side: the store's writer thread, the raw loop.
fn toggle(kind: &str) -> &'static str {
    if kind == "ours" {
        "outboxkit_sqlite::conn::writer_loop*"
    } else {
        "outbox_bench::sqlite::raw_burn*"
    }
}

async fn instructions(ctx: &Ctx) -> Row {
    let key = "sqlite-instructions-per-delivery";
    let scenario = "sqlite writer-thread instructions per delivered message (ratio raw ÷ ours)";
    let target = Target::MinRatio(0.4);
    let has_valgrind = tokio::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    if !has_valgrind {
        return Row::not_run(
            key,
            scenario,
            target,
            Status::Skipped("valgrind not installed".into()),
        );
    }
    let r = async {
        let ours = per_delivery(ctx, "ours").await?;
        let raw = per_delivery(ctx, "raw").await?;
        Ok::<_, String>((ours, raw))
    }
    .await;
    match r {
        Ok((ours, raw)) => Row::peer_cost(
            key,
            scenario,
            format!("{} − {}", INSTR_N.1, INSTR_N.0),
            Figure::per_delivery(ours, "instr/delivery"),
            Figure::per_delivery(raw, "instr/delivery"),
            target,
            format!(
                "callgrind Ir in the writer thread (ours: outbox-sqlite-writer; raw: the loop's \
                 thread), claim {BATCH} + complete {BATCH}, difference of {} and {} messages",
                INSTR_N.1, INSTR_N.0
            ),
        ),
        Err(e) => Row::not_run(key, scenario, target, Status::Error(e)),
    }
}

/// Instructions per delivered message of one side: the difference of two sizes.
async fn per_delivery(ctx: &Ctx, kind: &str) -> BenchResult<f64> {
    let small = counted(ctx, kind, INSTR_N.0).await?;
    let large = counted(ctx, kind, INSTR_N.1).await?;
    Ok((large as f64 - small as f64) / (INSTR_N.1 - INSTR_N.0) as f64)
}

/// Load `n` messages into a fresh file and count the child's instructions delivering them.
async fn counted(ctx: &Ctx, kind: &str, n: usize) -> BenchResult<u64> {
    let (ours, raw) = paths(ctx, "instr")?;
    let out_file = ctx.scratch.join(format!("callgrind-{kind}-{n}.out"));
    let r = async {
        let path = if kind == "ours" {
            let store = store(&ours).await?;
            load(&store, n).await?;
            drop(store);
            ours.clone()
        } else {
            let raw_path = raw.clone();
            tokio::task::spawn_blocking(move || {
                let mut conn = open_raw(&raw_path)?;
                raw_load(&mut conn, n)
            })
            .await
            .map_err(|e| format!("blocking task: {e}"))?
            .map_err(|e| format!("raw: {e}"))?;
            raw.clone()
        };
        // The store's threads close their connections once its last handle is gone.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let out = tokio::process::Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out_file.display()))
            .arg("--collect-atstart=no")
            .arg(format!("--toggle-collect={}", toggle(kind)))
            .arg(exe)
            .arg("--child-sqlite-instr")
            .arg(kind)
            .arg(&path)
            .arg(n.to_string())
            .output()
            .await
            .map_err(|e| format!("valgrind: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "the counting child failed: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
        }
        let text = std::fs::read_to_string(&out_file).map_err(|e| format!("callgrind: {e}"))?;
        totals(&text).ok_or_else(|| "no totals in the callgrind output".to_owned())
    }
    .await;
    cleanup(&[&ours, &raw]);
    // `OUTBOX_BENCH_KEEP_CALLGRIND=DIR`: keep the profile (to read with `callgrind_annotate`).
    match std::env::var_os("OUTBOX_BENCH_KEEP_CALLGRIND").filter(|_| r.is_ok()) {
        Some(dir) => {
            let kept = Path::new(&dir).join(format!("sqlite-{kind}-{n}.callgrind"));
            std::fs::rename(&out_file, &kept)
                .or_else(|_| std::fs::copy(&out_file, &kept).map(|_| ()))
                .map_err(|e| format!("keeping {}: {e}", kept.display()))?;
        }
        None => {
            let _ = std::fs::remove_file(&out_file);
        }
    }
    let ir = r?;
    if ir == 0 {
        return Err(format!("callgrind counted nothing in {}", toggle(kind)));
    }
    Ok(ir)
}

/// The instruction total of a callgrind output file (`totals:` or `summary:` line).
pub fn totals(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// `--child-sqlite-instr ours|raw PATH N`: deliver the `N` messages loaded into `PATH`
/// (run under callgrind by [`counted`]).
pub fn child_main(args: &[String]) -> std::process::ExitCode {
    let run = || -> BenchResult<()> {
        let [kind, path, n] = args else {
            return Err("--child-sqlite-instr needs ours|raw PATH N".into());
        };
        let n: usize = n.parse().map_err(|_| "N must be a number".to_owned())?;
        let path = Path::new(path);
        let done = match kind.as_str() {
            "ours" => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("runtime: {e}"))?;
                rt.block_on(async {
                    let store = SqliteStore::open(
                        SqliteConfig::new(path),
                        Arc::new(SystemClock),
                        Arc::new(OsEntropy),
                    )
                    .await
                    .map_err(err("open"))?;
                    deliver_all(&store).await
                })?
            }
            "raw" => {
                let mut conn = open_raw(path).map_err(|e| format!("raw: {e}"))?;
                raw_burn(&mut conn).map_err(|e| format!("raw: {e}"))?.done as usize
            }
            other => return Err(format!("unknown side {other:?}")),
        };
        if done != n {
            return Err(format!("delivered {done} of {n}"));
        }
        Ok(())
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callgrind_totals_are_read() {
        let text = "version: 1\ncreator: callgrind\nevents: Ir\nsummary: 12345\ntotals: 12345\n";
        assert_eq!(totals(text), Some(12345));
        assert_eq!(totals("events: Ir\n"), None);
    }
}
