//! A write lock held past the busy timeout is `Unavailable`, and only while it is held.

use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{DeliveryStore, ErrorKind, MessageStore, NewMessage};
use outboxkit_sqlite::SqliteConfig;
use outboxkit_testing::ManualClock;
use rusqlite::{Connection, TransactionBehavior};

use crate::common::{claim_for, consumer, open_with};

#[tokio::test(flavor = "multi_thread")]
async fn busy_past_the_timeout_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.db");
    let clock = ManualClock::new();
    let mut config = SqliteConfig::new(&path);
    config.busy_timeout = Duration::from_millis(100);
    let store = open_with(config, clock.clone()).await;
    consumer(&store, &clock, "worker", "*").await;
    store
        .enqueue(NewMessage::new("order.created", serde_json::json!(1)))
        .await
        .unwrap();

    // Another connection takes the write lock and keeps it.
    let mut raw = Connection::open(&path).unwrap();
    let tx = raw
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    tx.execute("CREATE TABLE app_lock_holder (x INTEGER)", [])
        .unwrap();

    let err = store
        .enqueue(NewMessage::new("order.created", serde_json::json!(2)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    let err = store.claim(&claim_for("worker", 10)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // Readers are not blocked by a writer (WAL).
    assert_eq!(store.stats().await.unwrap().pending, 1);

    tx.rollback().unwrap();
    store
        .enqueue(NewMessage::new("order.created", serde_json::json!(2)))
        .await
        .expect("the enqueue goes through once the lock is gone");
    assert_eq!(
        store.claim(&claim_for("worker", 10)).await.unwrap().len(),
        2
    );
}
