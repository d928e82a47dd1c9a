//! Retention on the day-partitioned history: a purge that empties a day's partition, wholly
//! before the cutoff, drops it; a partition that still holds rows (or the newest one) stays,
//! and completions after the purge find their partitions.

use std::time::Duration;

use outboxkit_core::{Clock, DeliveryStore, Ledger, MessageStore, OperatorStore, RetentionCutoffs};
use outboxkit_testing::ManualClock;

use crate::support::{claim_request, count, order, success, with_db};

const DAY: Duration = Duration::from_secs(86_400);

async fn deliver(store: &outboxkit_postgres::PostgresStore, clock: &ManualClock, n: usize) {
    for i in 0..n {
        store.enqueue(order(i)).await.unwrap();
    }
    let got = store.claim(&claim_request(100)).await.unwrap();
    assert_eq!(got.len(), n);
    let items: Vec<_> = got
        .into_iter()
        .map(|c| (c.lease, success(clock.now())))
        .collect();
    for r in store.complete_many(&items).await.unwrap() {
        r.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_day_drops_its_partition_and_a_kept_one_stays() {
    with_db(|db| async move {
        let clock = ManualClock::new();
        let store = db
            .ready_store(db.pool(&db.app("retention"), 2).await, clock.clone())
            .await;
        let partitions =
            "SELECT count(*) FROM pg_inherits WHERE inhparent = '{s}.history'::regclass";
        let holding = |day: i64| {
            format!("SELECT count(*) FROM {{s}}.history WHERE completed_at / 86400000 = {day}")
        };
        let first_day = clock.now().as_unix_millis() / 86_400_000;
        deliver(&store, &clock, 3).await;
        clock.advance(DAY * 2);
        deliver(&store, &clock, 2).await;
        clock.advance(DAY * 10);
        let before = count(&db, partitions).await;
        assert_eq!(count(&db, &holding(first_day)).await, 3);

        // The cutoff falls between the two days: the first day's rows go, and its partition.
        let cutoff =
            outboxkit_core::Timestamp::from_unix_millis((first_day + 1) * 86_400_000).unwrap();
        let report = store
            .purge_expired(&RetentionCutoffs::uniform(cutoff), 100)
            .await
            .unwrap();
        assert_eq!(report.deliveries, 3);
        assert_eq!(count(&db, &holding(first_day)).await, 0);
        let after = count(&db, partitions).await;
        assert!(
            after < before,
            "the emptied day is dropped ({before} → {after})"
        );
        assert_eq!(
            count(&db, &holding(first_day + 2)).await,
            2,
            "the later day keeps its rows"
        );
        assert_eq!(store.stats().await.unwrap().succeeded, 2);

        // Completions go on in partitions made ahead of the clock.
        deliver(&store, &clock, 1).await;
        assert_eq!(store.stats().await.unwrap().succeeded, 3);
    })
    .await;
}
