//! What a scrape and a readiness probe read: `queue_stats` and `list_consumers` never touch
//! the finished history, so they answer at once however large it grows — even while another
//! session holds the history table locked.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{Clock, DeliveryStore, EndpointStore, MessageStore, SystemClock};
use outboxkit_core::{DeliveryStoreExt, OperatorStore};
use outboxkit_postgres::sqlx;

use crate::support::{claim_request, order, success, with_db};

/// Far longer than either call takes unblocked; a call that waits on the lock never returns.
const DEADLINE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_stats_and_the_readiness_probe_never_read_the_finished_history() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store = db
            .ready_store(db.pool(&db.app("stats"), 4).await, clock.clone())
            .await;
        for n in 0..3 {
            store.enqueue(order(n)).await.unwrap();
        }
        let got = store.claim(&claim_request(2)).await.unwrap();
        assert_eq!(got.len(), 2);
        store
            .complete(&got[0].lease, &success(clock.now()))
            .await
            .unwrap();

        // Another session takes the history table and holds it.
        let mut locker = db.admin.begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "LOCK TABLE \"{}\".history IN ACCESS EXCLUSIVE MODE",
            db.schema
        )))
        .execute(&mut *locker)
        .await
        .unwrap();

        let queue = tokio::time::timeout(DEADLINE, store.queue_stats())
            .await
            .expect("queue_stats waited on the finished history")
            .unwrap();
        assert_eq!(
            (queue.pending, queue.processing, queue.succeeded, queue.dead),
            (1, 1, 0, 0)
        );
        tokio::time::timeout(DEADLINE, store.list_consumers())
            .await
            .expect("the readiness probe waited on the finished history")
            .unwrap();
        locker.rollback().await.unwrap();

        let all = store.stats().await.unwrap();
        // The same counts and oldest due (the age differs: the clock is the real one).
        let age = queue.oldest_due_age;
        assert_eq!(
            outboxkit_core::Stats {
                oldest_due_age: age,
                ..all.clone().unfinished()
            },
            queue
        );
        assert_eq!(all.succeeded, 1);
    })
    .await;
}
