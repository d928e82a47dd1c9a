//! Claim exclusivity across independent pools with many concurrent claimers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::OperatorStore;
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
            count(&db, "SELECT (SELECT count(*) FROM {s}.attempts) + (SELECT count(*) FROM {s}.history WHERE a_started IS NOT NULL)").await,
            DELIVERIES as i64
        );
    })
    .await;
}

/// The claim always runs on its generic plan, planned once per connection: planned on an
/// empty queue (the first claim of a pool of one), the same plan then works off an 8,000-row
/// backlog, a group that turns up later still gets its turn in the next claim (fair rounds),
/// and every delivery is claimed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generic_claim_plan_keeps_fair_rounds() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store = db
            .ready_store(db.pool(&db.app("generic"), 1).await, clock.clone())
            .await;
        assert!(store.claim(&claim_request(50)).await.unwrap().is_empty());
        let big = 8_000;
        let out = store
            .enqueue_batch((0..big).map(|n| order(n).tenant("big")).collect())
            .await
            .unwrap();
        assert!(out.iter().all(|e| e.deliveries == 1));
        let bytes = count(&db, "SELECT pg_relation_size('{s}.queue')").await;
        assert!(bytes >= 1 << 19, "the backlog takes {bytes} bytes");

        let mut seen: HashMap<DeliveryId, u32> = HashMap::new();
        let mut drain = |claimed: Vec<outboxkit_core::Claimed>| {
            for c in &claimed {
                *seen.entry(c.lease.delivery_id).or_default() += 1;
            }
            claimed
                .into_iter()
                .map(|c| (c.lease, success(clock.now())))
                .collect::<Vec<_>>()
        };
        let first = store.claim(&claim_request(50)).await.unwrap();
        assert_eq!(first.len(), 50);
        assert!(first.iter().all(|c| c.delivery.tenant.as_str() == "big"));
        for r in store.complete_many(&drain(first)).await.unwrap() {
            r.unwrap();
        }

        // A second group turns up behind the backlog: the generic plan gives it its
        // rounds in the very next claim.
        store
            .enqueue_batch((0..3).map(|n| order(n).tenant("late")).collect())
            .await
            .unwrap();
        let second = store.claim(&claim_request(50)).await.unwrap();
        assert_eq!(second.len(), 50);
        let late: Vec<_> = second
            .iter()
            .filter(|c| c.delivery.tenant.as_str() == "late")
            .collect();
        assert_eq!(late.len(), 3, "the late group's three deliveries");
        // Rounds: the groups' first rows come first, in the order of their oldest row.
        assert_eq!(second[0].delivery.tenant.as_str(), "big");
        assert_eq!(second[1].delivery.tenant.as_str(), "late");
        for r in store.complete_many(&drain(second)).await.unwrap() {
            r.unwrap();
        }

        loop {
            let claimed = store.claim(&claim_request(200)).await.unwrap();
            if claimed.is_empty() {
                break;
            }
            for r in store.complete_many(&drain(claimed)).await.unwrap() {
                r.unwrap();
            }
        }
        assert_eq!(seen.len(), big + 3, "every delivery was claimed");
        assert!(seen.values().all(|&n| n == 1), "none claimed twice");
        let stats = store.stats().await.unwrap();
        assert_eq!(stats.succeeded, big as u64 + 3);
        assert_eq!(stats.total(), big as u64 + 3);
    })
    .await;
}

/// Rows claimed before version 9 (whose claim moved `due_at` to the lease end, as version
/// 8's did) read and claim as rows claimed since: due again at their lease end, and taken at
/// that place, before a row due later and after one due earlier. A claim since version 9
/// leaves `due_at` in place, so its update is HOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_claimed_before_version_9_keep_their_place() {
    use crate::support::LEASE;
    use outboxkit_core::{Ledger, Stats, TenantId};
    use outboxkit_testing::ManualClock;
    with_db(|db| async move {
        let clock = ManualClock::new();
        let store = db
            .ready_store(db.pool(&db.app("v8"), 2).await, clock.clone())
            .await;
        let t0 = clock.now();
        let first = store.enqueue(order(1)).await.unwrap();
        let second = store.enqueue(order(2)).await.unwrap();
        let claimed = store.claim(&claim_request(2)).await.unwrap();
        assert_eq!(claimed.len(), 2);
        // The claim left due_at where it was and changed no indexed column.
        let moved = count(
            &db,
            "SELECT count(*) FROM {s}.queue WHERE state = 2 AND due_at = lease_until",
        )
        .await;
        assert_eq!(moved, 0);
        // One row as version 8's claim left it: due_at at its lease end.
        let q = format!(
            "UPDATE \"{}\".queue x SET due_at = x.lease_until FROM \"{}\".messages m \
             WHERE m.id = x.message_id AND m.id = $1",
            db.schema, db.schema
        );
        outboxkit_postgres::sqlx::query(sqlx::AssertSqlSafe(q))
            .bind(first.message_id.as_uuid())
            .execute(&db.admin)
            .await
            .unwrap();
        let lease_end = t0.saturating_add(LEASE);
        let late = store
            .enqueue(order(3).delay(LEASE + Duration::from_secs(10)))
            .await
            .unwrap();
        let early = store
            .enqueue(order(4).delay(Duration::from_secs(10)))
            .await
            .unwrap();
        for c in &claimed {
            let d = store
                .get_delivery(&TenantId::default(), c.delivery.id)
                .await
                .unwrap();
            assert_eq!(
                d.next_attempt_at, lease_end,
                "next attempt at the lease end"
            );
        }
        clock.advance(LEASE + Duration::from_secs(20));
        let stats: Stats = store.stats().await.unwrap();
        assert_eq!(
            stats.oldest_due_at,
            Some(t0.saturating_add(Duration::from_secs(10)))
        );
        let again = store.claim(&claim_request(10)).await.unwrap();
        let got: Vec<_> = again.iter().map(|c| c.message.id).collect();
        assert_eq!(
            got,
            vec![
                early.message_id,
                first.message_id,
                second.message_id,
                late.message_id
            ],
            "the row due at 10 s, both stranded rows at their lease end (60 s), the row due at 70 s"
        );
        assert!(again[1..3].iter().all(|c| c.lease.attempts == 2));
    })
    .await;
}
