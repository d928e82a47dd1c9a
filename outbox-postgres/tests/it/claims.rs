//! Claim exclusivity across independent pools with many concurrent claimers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{Clock, DeliveryId, DeliveryStore, MessageStore, Stopwatch, SystemClock};
use outboxkit_postgres::PostgresStore;

use crate::support::{claim_request, count, order, success, with_db};

const POOLS: usize = 4;
const TASKS_PER_POOL: usize = 4;
const DELIVERIES: usize = 5_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_delivery_is_claimed_once_across_pools() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let first = db
            .ready_store(db.pool(&db.app("p0"), 4).await, clock.clone())
            .await;
        let messages = (0..DELIVERIES).map(order).collect();
        let out = first.enqueue_batch(messages).await.unwrap();
        assert!(out.iter().all(|e| e.deliveries == 1));

        let mut stores: Vec<PostgresStore> = vec![first];
        for p in 1..POOLS {
            let pool = db.pool(&db.app(&format!("p{p}")), 4).await;
            stores.push(db.store(pool, clock.clone()));
        }
        let seen: Arc<Mutex<HashMap<DeliveryId, u32>>> = Arc::default();
        let mut tasks = Vec::new();
        for store in &stores {
            for _ in 0..TASKS_PER_POOL {
                let (store, seen, clock) = (store.clone(), seen.clone(), clock.clone());
                tasks.push(tokio::spawn(async move {
                    let watch = Stopwatch::start();
                    let mut empty = 0;
                    // Bounded: stop after a few empty claims in a row, or after two minutes.
                    while empty < 5 && watch.elapsed() < Duration::from_secs(120) {
                        let claimed = store.claim(&claim_request(25)).await.unwrap();
                        if claimed.is_empty() {
                            empty += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                        empty = 0;
                        {
                            let mut seen = seen.lock().unwrap();
                            for c in &claimed {
                                *seen.entry(c.lease.delivery_id).or_default() += 1;
                            }
                        }
                        let items: Vec<_> = claimed
                            .into_iter()
                            .map(|c| (c.lease, success(clock.now())))
                            .collect();
                        for r in store.complete_many(&items).await.unwrap() {
                            r.unwrap();
                        }
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }

        let seen = std::mem::take(&mut *seen.lock().unwrap());
        assert_eq!(seen.len(), DELIVERIES, "every delivery was claimed");
        let twice: Vec<_> = seen.iter().filter(|(_, &n)| n != 1).collect();
        assert!(twice.is_empty(), "claimed more than once: {twice:?}");
        let stats = stores[0].stats().await.unwrap();
        assert_eq!(stats.succeeded, DELIVERIES as u64);
        assert_eq!(
            stats.total(),
            DELIVERIES as u64,
            "none left behind: {stats:?}"
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM {s}.attempts").await,
            DELIVERIES as i64
        );
    })
    .await;
}
