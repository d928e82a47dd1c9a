//! A database made by schema version 13 (no consumer status) upgrades in place while several
//! processes migrate at once: its consumers are active, their deliveries kept, and pausing
//! one then holds its pending deliveries.

use outboxkit_core::{ConsumerStatus, DeliveryStatus, EndpointStore, MessageStore, OperatorStore};
use outboxkit_postgres::sqlx;
use outboxkit_testing::ManualClock;

use crate::legacy::migrate_concurrently;
use crate::support::{order, with_db, worker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_13_database_upgrades_with_its_consumers_active() {
    with_db(|db| async move {
        let s = format!("\"{}\"", db.schema);
        let clock = ManualClock::new();
        {
            let pool = db.pool(&db.app("v13"), 2).await;
            let store = db.ready_store(pool, clock.clone()).await;
            for n in 0..2 {
                store.enqueue(order(n)).await.unwrap();
            }
        }
        // Make it the database version 13 left: no status column, no record of version 14 or later.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {s}.consumers DROP COLUMN status; \
             DELETE FROM {s}.schema_migrations WHERE version >= 14"
        )))
        .execute(&db.admin)
        .await
        .unwrap();
        let stores = migrate_concurrently(&db, &clock, 13).await;
        let store = stores.into_iter().next().unwrap();
        let all = store.list_consumers().await.unwrap();
        assert_eq!(
            all.iter()
                .map(|c| (c.name.clone(), c.status))
                .collect::<Vec<_>>(),
            vec![(worker(), ConsumerStatus::Active)]
        );
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (
                stats.count(DeliveryStatus::Pending),
                stats.count(DeliveryStatus::Held)
            ),
            (2, 0),
            "the deliveries from before the upgrade are kept"
        );
        store
            .set_consumer_status(&worker(), ConsumerStatus::Paused)
            .await
            .unwrap();
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (
                stats.count(DeliveryStatus::Pending),
                stats.count(DeliveryStatus::Held)
            ),
            (0, 2),
            "the worker's pending deliveries wait"
        );
    })
    .await;
}
