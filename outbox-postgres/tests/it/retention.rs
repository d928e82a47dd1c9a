//! Retention on the day-partitioned history: a purge that empties a day's partition, wholly
//! before the cutoff, drops it; a partition that still holds rows (or the newest one) stays,
//! and completions after the purge find their partitions. A purge takes the partitions
//! oldest first and keeps a message until its last delivery is gone.

use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Clock, Consumer, ConsumerName, ConsumerStatus, DeliveryStore, EndpointStore,
    ErrorKind, Ledger, MessageStore, OperatorStore, RetentionCutoffs, TenantId, Timestamp,
    TopicFilter,
};
use outboxkit_postgres::PostgresStore;
use outboxkit_testing::ManualClock;

use crate::support::{claim_request, count, order, success, with_db, LEASE};

const DAY: Duration = Duration::from_secs(86_400);

/// Enqueue `n` messages and deliver them to `worker`.
async fn deliver(store: &PostgresStore, clock: &ManualClock, n: usize) {
    for i in 0..n {
        store.enqueue(order(i)).await.unwrap();
    }
    finish(store, clock, &claim_request(100), n).await;
}

/// Claim with `req`, expect `n` deliveries and complete them as succeeded.
async fn finish(store: &PostgresStore, clock: &ManualClock, req: &ClaimRequest, n: usize) {
    let got = store.claim(req).await.unwrap();
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

/// Two consumers, so each message has two deliveries finishing on different days: a purge of
/// two rows takes the oldest day's partition first and removes no message whose other
/// delivery is still in the history or the queue; the message goes with its last delivery,
/// and a call that purged fewer than its limit finds nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_goes_oldest_partition_first_and_keeps_a_message_until_its_last_delivery() {
    with_db(|db| async move {
        let clock = ManualClock::new();
        let store = db
            .ready_store(db.pool(&db.app("retention_order"), 2).await, clock.clone())
            .await;
        let audit = ConsumerName::new("audit").unwrap();
        let consumer = Consumer {
            name: audit.clone(),
            filter: TopicFilter::all(),
            created_at: clock.now(),
            status: ConsumerStatus::Active,
        };
        store.put_consumer(&consumer).await.unwrap();
        let t = TenantId::default();
        let m1 = store.enqueue(order(1)).await.unwrap().message_id;
        let m2 = store.enqueue(order(2)).await.unwrap().message_id;
        // Day 0: the worker's two deliveries finish. Day 2: the audit's delivery of m1.
        let audit_one = ClaimRequest::new(1, LEASE).handler(audit, 5);
        finish(&store, &clock, &claim_request(10), 2).await;
        clock.advance(DAY * 2);
        finish(&store, &clock, &audit_one, 1).await;
        clock.advance(DAY * 10);
        let cutoff =
            Timestamp::from_unix_millis(clock.now().as_unix_millis() - 5 * 86_400_000).unwrap();

        let purge = || store.purge_tenant(&t, cutoff, 2);
        let r = purge().await.unwrap();
        assert_eq!(
            (r.deliveries, r.messages),
            (2, 0),
            "day 0 first; both messages keep a delivery"
        );
        let r = purge().await.unwrap();
        assert_eq!(
            (r.deliveries, r.messages),
            (1, 1),
            "day 2: m1 goes with its last delivery"
        );
        let gone = store.get_message(&t, m1).await.map(|_| ());
        assert_eq!(gone.unwrap_err().kind(), ErrorKind::NotFound);
        store
            .get_message(&t, m2)
            .await
            .expect("m2 has a pending delivery");
        let r = purge().await.unwrap();
        assert_eq!((r.deliveries, r.messages), (0, 0));

        // The pending delivery finishes; a later cutoff takes it and its message.
        finish(&store, &clock, &audit_one, 1).await;
        clock.advance(DAY);
        let r = store.purge_tenant(&t, clock.now(), 2).await.unwrap();
        assert_eq!((r.deliveries, r.messages), (1, 1));
        let gone = store.get_message(&t, m2).await.map(|_| ());
        assert_eq!(gone.unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(store.stats().await.unwrap().total(), 0);
    })
    .await;
}
