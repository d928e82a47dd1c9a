//! Connection loss and script-cache loss in the middle of a run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{ClaimRequest, DeliveryStore, ErrorKind, MessageStore, NewMessage};
use outboxkit_redis::RedisStore;
use outboxkit_testing::ManualClock;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::common::{add_worker, admin, claim_request, isolated, store, succeeded, worker};

const MESSAGES: usize = 2_000;

/// The drain's claim: the worker's budget is large because the drain's clock jumps steal
/// leases from tasks still completing (each steal spends an attempt), and under load a batch
/// can change hands more than the usual budget of 10 times; a row that died of that would
/// be the harness's doing, not the fault's.
fn drain_request() -> ClaimRequest {
    ClaimRequest::new(20, Duration::from_secs(60)).handler(worker(), 1_000)
}

async fn client_id(store: &RedisStore) -> i64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut store.connection())
        .await
        .expect("client id")
}

/// Claim and complete until the queue is empty, retrying calls that fail with
/// `Unavailable`; a claim whose reply was lost strands its rows until their lease ends, so
/// when the queue looks empty the clock jumps past the lease once more. Once a quarter is
/// done, claimed batches wait for the fault before completing, so the fault always lands
/// mid-run with leases outstanding.
async fn drain(
    store: RedisStore,
    clock: Arc<ManualClock>,
    progress: Arc<AtomicUsize>,
    mut faulted: watch::Receiver<bool>,
) {
    let mut idle_rounds = 0;
    while idle_rounds < 2 {
        let got = match store.claim(&drain_request()).await {
            Ok(g) => g,
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(e) => panic!("claim failed: {e:?}"),
        };
        if got.is_empty() {
            idle_rounds += 1;
            clock.advance(Duration::from_secs(61));
            continue;
        }
        idle_rounds = 0;
        if progress.load(Ordering::Relaxed) >= MESSAGES / 4 {
            faulted
                .wait_for(|f| *f)
                .await
                .expect("the fault is injected");
        }
        let items: Vec<_> = got.into_iter().map(|c| (c.lease, succeeded())).collect();
        match store.complete_many(&items).await {
            Ok(results) => {
                progress.fetch_add(
                    results.iter().filter(|r| r.is_ok()).count(),
                    Ordering::Relaxed,
                );
            }
            // Either the rows stay claimed and come back after their lease, or the reply
            // was lost after they were written: the store's counts below tell.
            Err(e) if e.kind() == ErrorKind::Unavailable => {}
            Err(e) => panic!("complete failed: {e:?}"),
        }
    }
}

async fn run_with_fault<F, Fut>(prefix: String, fault: F)
where
    F: FnOnce(RedisStore) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let clock = ManualClock::new();
    let s = store(&prefix, clock.clone()).await;
    add_worker(&s, clock.as_ref()).await;
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(500) {
        let batch = chunk
            .iter()
            .map(|i| NewMessage::new("job.run", serde_json::json!({ "n": i })))
            .collect();
        s.enqueue_batch(batch).await.expect("enqueue batch");
    }
    let progress = Arc::new(AtomicUsize::new(0));
    let (fault_tx, fault_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    for _ in 0..4 {
        tasks.spawn(drain(
            s.clone(),
            clock.clone(),
            progress.clone(),
            fault_rx.clone(),
        ));
    }
    while progress.load(Ordering::Relaxed) < MESSAGES / 4 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let at_fault = s.stats().await.expect("stats before the fault");
    assert!(
        at_fault.pending > 0,
        "work is left when the fault hits: {at_fault:?}"
    );
    fault(s.clone()).await;
    fault_tx.send_replace(true);
    while let Some(r) = tasks.join_next().await {
        r.expect("a drain task");
    }
    let stats = s.stats().await.expect("stats after the fault");
    assert_eq!(stats.succeeded, MESSAGES as u64, "{stats:?}");
    assert_eq!(
        stats.total(),
        MESSAGES as u64,
        "nothing left behind: {stats:?}"
    );
}

/// `CLIENT KILL` of the store's own connection (found by `CLIENT ID`, so no other test's
/// connection is touched) mid-run: the store reconnects and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_kill_mid_run_loses_nothing() {
    isolated(|prefix| async move {
        run_with_fault(prefix, |s| async move {
            let before = client_id(&s).await;
            let killed: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(before)
                .query_async(&mut admin().await)
                .await
                .expect("client kill");
            assert_eq!(killed, 1, "the store's connection was killed");
            // The next calls go over a new connection.
            let after = loop {
                match redis::cmd("CLIENT")
                    .arg("ID")
                    .query_async::<i64>(&mut s.connection())
                    .await
                {
                    Ok(id) => break id,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            };
            assert_ne!(before, after, "the store reconnected");
        })
        .await;
    })
    .await;
}

/// `SCRIPT FLUSH` mid-run: the next script calls meet `NOSCRIPT`, load the scripts again and
/// succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_mid_run_reloads() {
    isolated(|prefix| async move {
        run_with_fault(prefix, |_| async move {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut admin().await)
                .await
                .expect("script flush");
        })
        .await;
    })
    .await;
}

/// A flushed script cache is reloaded by the very next call, which succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_succeed_right_after_script_flush() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let s = store(&prefix, clock.clone()).await;
        add_worker(&s, clock.as_ref()).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin().await)
            .await
            .expect("script flush");
        let e = s
            .enqueue(NewMessage::new("job.run", serde_json::json!({})))
            .await
            .expect("enqueue after flush");
        assert_eq!(e.deliveries, 1);
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin().await)
            .await
            .expect("script flush");
        let got = s
            .claim(&claim_request(10))
            .await
            .expect("claim after flush");
        assert_eq!(got.len(), 1);
    })
    .await;
}
