//! Several OS processes on one database file. The test binary spawns itself: with
//! `OUTBOX_SQLITE_IT_WORKER` set, the `processes::worker` test acts as a worker process.
//! Workers read time from a `ManualClock` that is never advanced, so their leases never run
//! out on their own; the parent moves its own clock to expire them.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use outboxkit_core::{DeliveryId, DeliveryStatus, DeliveryStore, MessageStore, NewMessage};
use outboxkit_core::{DeliveryStoreExt, OperatorStore};
use outboxkit_sqlite::SqliteStore;
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::{claim_for, consumer, open, succeeded, LEASE};

const MODE: &str = "OUTBOX_SQLITE_IT_WORKER";
const DB: &str = "OUTBOX_SQLITE_IT_DB";
const OUT: &str = "OUTBOX_SQLITE_IT_OUT";
const GO: &str = "OUTBOX_SQLITE_IT_GO";

/// Write `n` messages, each with one delivery to the consumer `worker`.
async fn prepare(path: &Path, n: usize) -> SqliteStore {
    let clock = ManualClock::new();
    let store = open(path, clock.clone()).await;
    consumer(&store, &clock, "worker", "work.*").await;
    let messages = (0..n)
        .map(|i| NewMessage::new("work.item", serde_json::json!(i)))
        .collect();
    store.enqueue_batch(messages).await.unwrap();
    store
}

/// Claim in batches until nothing is claimable, recording every claimed id (before
/// completing it) and completing each batch in one call.
async fn drain(store: &SqliteStore) -> Vec<DeliveryId> {
    let mut claimed = Vec::new();
    loop {
        let batch = store.claim(&claim_for("worker", 50)).await.expect("claim");
        if batch.is_empty() {
            return claimed;
        }
        claimed.extend(batch.iter().map(|c| c.delivery.id));
        let items: Vec<_> = batch.iter().map(succeeded).collect();
        let results = store.complete_many(&items).await.expect("complete_many");
        assert!(results.iter().all(Result::is_ok), "a fresh lease was lost");
    }
}

fn write_ids(path: &Path, ids: &[DeliveryId]) {
    let text: String = ids.iter().map(|id| format!("{id}\n")).collect();
    std::fs::write(path, text).unwrap();
}

fn read_ids(path: &Path) -> Vec<DeliveryId> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| DeliveryId::parse(l).unwrap())
        .collect()
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var(name).unwrap_or_else(|_| panic!("{name} is set for workers")))
}

async fn wait_for(path: &Path) {
    while !path.exists() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The worker process. Run without `OUTBOX_SQLITE_IT_WORKER` (the normal test run), it
/// checks the drain routine alone: one worker claims every delivery of a file exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn worker() {
    match std::env::var(MODE).as_deref() {
        Ok("drain") => {
            let store = open(&env_path(DB), ManualClock::new()).await;
            wait_for(&env_path(GO)).await;
            write_ids(&env_path(OUT), &drain(&store).await);
        }
        Ok("crash") => crash_worker().await,
        Ok(other) => panic!("unknown worker mode {other}"),
        Err(_) => {
            let dir = tempfile::tempdir().unwrap();
            let store = prepare(&dir.path().join("one.db"), 300).await;
            let ids = drain(&store).await;
            let unique: HashSet<_> = ids.iter().collect();
            assert_eq!((ids.len(), unique.len()), (300, 300));
            assert_eq!(store.stats().await.unwrap().succeeded, 300);
        }
    }
}

/// Claim all 100 deliveries, complete the first 50 (recording each), say so, then keep
/// writing until killed.
async fn crash_worker() {
    let store = open(&env_path(DB), ManualClock::new()).await;
    let batch = store.claim(&claim_for("worker", 100)).await.unwrap();
    assert_eq!(batch.len(), 100);
    let mut out = std::fs::File::create(env_path(OUT)).unwrap();
    for c in &batch[..50] {
        let (lease, completion) = succeeded(c);
        store.complete(&lease, &completion).await.unwrap();
        writeln!(out, "{}", c.delivery.id).unwrap();
        out.flush().unwrap();
    }
    std::fs::write(env_path(GO), b"ready").unwrap();
    for i in 0u64.. {
        // Messages of a topic nobody consumes: writes in flight when the kill comes.
        store
            .enqueue(NewMessage::new("noise.tick", serde_json::json!(i)))
            .await
            .unwrap();
    }
}

fn spawn_worker(mode: &str, db: &Path, out: &Path, go: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "processes::worker",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(MODE, mode)
        .env(DB, db)
        .env(OUT, out)
        .env(GO, go)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a worker process")
}

fn wait_ok(child: std::process::Child) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "worker failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_claim_each_delivery_exactly_once() {
    const N: usize = 5000;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let store = prepare(&db, N).await;
    let go = dir.path().join("go");
    let outs = [dir.path().join("a.ids"), dir.path().join("b.ids")];
    let children: Vec<_> = outs
        .iter()
        .map(|out| spawn_worker("drain", &db, out, &go))
        .collect();
    std::fs::write(&go, b"go").unwrap();
    tokio::task::spawn_blocking(move || children.into_iter().for_each(wait_ok))
        .await
        .unwrap();

    let (a, b) = (read_ids(&outs[0]), read_ids(&outs[1]));
    eprintln!("worker a claimed {}, worker b claimed {}", a.len(), b.len());
    let (sa, sb): (HashSet<_>, HashSet<_>) = (a.iter().collect(), b.iter().collect());
    assert_eq!(sa.len(), a.len(), "worker a claimed a delivery twice");
    assert_eq!(sb.len(), b.len(), "worker b claimed a delivery twice");
    assert_eq!(
        sa.intersection(&sb).count(),
        0,
        "a delivery was claimed by both workers"
    );
    assert_eq!(a.len() + b.len(), N, "every delivery was claimed");
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.succeeded, N as u64);
    assert_eq!(stats.total(), N as u64);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_leaves_a_clean_database_and_claimable_leases() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    drop(prepare(&db, 100).await);
    let (out, ready) = (dir.path().join("done.ids"), dir.path().join("ready"));
    let mut child = spawn_worker("crash", &db, &out, &ready);
    let ready_probe = ready.clone();
    let started = tokio::time::timeout(Duration::from_secs(120), wait_for(&ready_probe)).await;
    child.kill().expect("SIGKILL the worker");
    let status = child.wait().unwrap();
    assert!(started.is_ok(), "the worker never got ready");
    assert!(!status.success());

    let integrity: String = Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");

    let clock = ManualClock::new();
    let store = open(&db, clock.clone()).await;
    let done: HashSet<DeliveryId> = read_ids(&out).into_iter().collect();
    assert_eq!(done.len(), 50);
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (stats.succeeded, stats.processing, stats.total()),
        (50, 50, 100)
    );
    assert!(
        store
            .claim(&claim_for("worker", 100))
            .await
            .unwrap()
            .is_empty(),
        "leases are live until they end"
    );

    clock.advance(LEASE + Duration::from_secs(1));
    let reclaimed = store.claim(&claim_for("worker", 100)).await.unwrap();
    assert_eq!(reclaimed.len(), 50);
    for c in &reclaimed {
        assert!(
            !done.contains(&c.delivery.id),
            "a finished delivery came back"
        );
        assert_eq!(c.lease.claimed_from, DeliveryStatus::Processing);
        assert_eq!(c.lease.attempts, 2);
    }
    let items: Vec<_> = reclaimed.iter().map(succeeded).collect();
    assert!(store
        .complete_many(&items)
        .await
        .unwrap()
        .iter()
        .all(Result::is_ok));
    assert_eq!(store.stats().await.unwrap().succeeded, 100);
}
