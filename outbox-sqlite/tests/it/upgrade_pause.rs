//! A file made before schema version 12 (no consumer status) upgrades in place: its consumers
//! are active, their deliveries untouched, and they can be paused.

use outboxkit_core::{ConsumerStatus, EndpointStore, MessageStore, NewMessage};
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::{claim_for, consumer, open};

#[tokio::test]
async fn a_version_11_file_upgrades_with_its_consumers_active() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new();
    {
        let store = open(&path, clock.clone()).await;
        consumer(&store, &clock, "billing", "*").await;
        store
            .enqueue(NewMessage::new("order.created", serde_json::json!({})))
            .await
            .unwrap();
    }
    // Make it the file version 11 left: no status column, no version 12 record.
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE outbox_consumers DROP COLUMN status; \
             DELETE FROM outbox_schema_version WHERE version = 12;",
        )
        .unwrap();
    }
    let store = open(&path, clock.clone()).await;
    let all = store.list_consumers().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].status, ConsumerStatus::Active);
    let name = all[0].name.clone();
    let paused = store
        .set_consumer_status(&name, ConsumerStatus::Paused)
        .await
        .unwrap();
    assert_eq!(paused.status, ConsumerStatus::Paused);
    assert!(
        outboxkit_core::DeliveryStore::claim(&store, &claim_for("billing", 10))
            .await
            .unwrap()
            .is_empty()
    );
    store
        .set_consumer_status(&name, ConsumerStatus::Active)
        .await
        .unwrap();
    let got = outboxkit_core::DeliveryStore::claim(&store, &claim_for("billing", 10))
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "the delivery from before the upgrade is kept");
}
