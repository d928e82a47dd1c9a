//! Connections cut under load: calls fail with `Unavailable` for a moment, then recover, and
//! every delivery is still completed exactly once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    Clock, Completion, DeliveryId, DeliveryStore, ErrorKind, Lease, MessageStore, Stopwatch,
};
use outboxkit_postgres::{sqlx, PostgresStore};
use outboxkit_testing::ManualClock;

use crate::support::{claim_request, count, order, success, with_db, LEASE};

const DELIVERIES: usize = 2_000;

/// Complete `items`, retrying while the outcome is unknown (`Unavailable`): a retry after a
/// completion that did commit finds the token cleared and reports `LeaseLost`.
async fn complete_surely(
    store: &PostgresStore,
    items: &[(Lease, Completion)],
    unavailable: &AtomicU64,
    done: &Mutex<HashMap<DeliveryId, u32>>,
) {
    let mut ambiguous = false;
    loop {
        match store.complete_many(items).await {
            Ok(results) => {
                let mut done = done.lock().unwrap();
                for ((lease, _), r) in items.iter().zip(results) {
                    match r {
                        Ok(()) => *done.entry(lease.delivery_id).or_default() += 1,
                        // An earlier try committed but its answer was lost.
                        Err(e) if ambiguous && e.kind() == ErrorKind::LeaseLost => {
                            *done.entry(lease.delivery_id).or_default() += 1
                        }
                        Err(e) => panic!("completion failed: {e:?}"),
                    }
                }
                return;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e:?}");
                ambiguous = true;
                unavailable.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cut_connections_fail_unavailable_then_recover() {
    with_db(|db| async move {
        let clock = ManualClock::new();
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let app = db.app("cut");
        let seed = db
            .ready_store(db.pool(&db.app("seed"), 2).await, dyn_clock.clone())
            .await;
        seed.enqueue_batch((0..DELIVERIES).map(order).collect())
            .await
            .unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let unavailable = Arc::new(AtomicU64::new(0));
        let done: Arc<Mutex<HashMap<DeliveryId, u32>>> = Arc::default();
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let store = db.store(db.pool(&app, 3).await, dyn_clock.clone());
            for _ in 0..2 {
                let (store, stop, unavailable, done, clock) = (
                    store.clone(),
                    stop.clone(),
                    unavailable.clone(),
                    done.clone(),
                    dyn_clock.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let claimed = match store.claim(&claim_request(10)).await {
                            Ok(c) => c,
                            Err(e) => {
                                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e:?}");
                                unavailable.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                        };
                        if claimed.is_empty() {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                        let items: Vec<_> = claimed
                            .into_iter()
                            .map(|c| (c.lease, success(clock.now())))
                            .collect();
                        complete_surely(&store, &items, &unavailable, &done).await;
                    }
                }));
            }
        }

        // Cut every connection of the claimers' pools, repeatedly, until the cuts have been
        // seen as `Unavailable` (bounded in rounds).
        let terminate = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                         WHERE application_name = $1";
        let mut rounds = 0;
        while rounds < 200 && (rounds < 3 || unavailable.load(Ordering::Relaxed) == 0) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _: i64 = sqlx::query_scalar(terminate)
                .bind(&app)
                .fetch_one(&db.admin)
                .await
                .unwrap();
            rounds += 1;
        }
        eprintln!(
            "cut connections {rounds} times; {} calls failed as unavailable",
            unavailable.load(Ordering::Relaxed)
        );
        assert!(
            unavailable.load(Ordering::Relaxed) > 0,
            "the cuts were never seen as Unavailable"
        );

        // Recovery: the claimers drain the queue. A claim whose answer was lost leaves its
        // rows leased; once the lease ends they are claimed again, so nothing is lost.
        let watch = Stopwatch::start();
        let mut last = 0;
        let mut idle_since = Stopwatch::start();
        loop {
            let stats = seed.stats().await.unwrap();
            if stats.succeeded == DELIVERIES as u64 {
                break;
            }
            assert!(
                watch.elapsed() < Duration::from_secs(120),
                "the queue did not drain: {stats:?}"
            );
            if stats.succeeded != last {
                last = stats.succeeded;
                idle_since = Stopwatch::start();
            } else if stats.pending == 0 && idle_since.elapsed() > Duration::from_secs(1) {
                clock.advance(LEASE + Duration::from_secs(1));
                idle_since = Stopwatch::start();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }

        let done = std::mem::take(&mut *done.lock().unwrap());
        assert_eq!(done.len(), DELIVERIES, "every delivery completed");
        assert!(done.values().all(|&n| n == 1), "a delivery completed twice");
        assert_eq!(
            count(&db, "SELECT (SELECT count(*) FROM {s}.attempts) + (SELECT count(*) FROM {s}.history WHERE a_started IS NOT NULL)").await,
            DELIVERIES as i64,
            "one ledger attempt per delivery (folded into its history row)"
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM {s}.queue"
            )
            .await,
            0
        );
    })
    .await;
}
