//! Bulk enqueue of 10,000 messages, and draining them in enqueue order.

use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{DeliveryStore, MessageStore, NewMessage};
use outboxkit_sqlite::SqliteStore;
use outboxkit_testing::ManualClock;
use rusqlite::{Connection, TransactionBehavior};

use crate::common::{claim_for, consumer, open, succeeded};

const N: usize = 10_000;

fn message(i: usize) -> NewMessage {
    NewMessage::new("order.created", serde_json::json!({ "n": i }))
}

/// Claim everything in batches of 1000 and complete each batch in one call; returns the
/// message numbers in claim order.
async fn drain(store: &SqliteStore) -> Vec<usize> {
    let mut seen = Vec::with_capacity(N);
    loop {
        let batch = store.claim(&claim_for("worker", 1000)).await.unwrap();
        if batch.is_empty() {
            break;
        }
        for c in &batch {
            seen.push(c.message.json().unwrap()["n"].as_u64().unwrap() as usize);
        }
        let items: Vec<_> = batch.iter().map(succeeded).collect();
        let results = store.complete_many(&items).await.unwrap();
        assert!(results.iter().all(Result::is_ok));
    }
    seen
}

/// Every delivery claimed exactly once, in enqueue order (all are due at the same time, so
/// the store's sequence decides).
fn check_drained(seen: &[usize]) {
    assert_eq!(seen.len(), N, "every delivery is claimed");
    let wrong = seen.iter().enumerate().find(|(i, n)| i != *n);
    assert_eq!(wrong, None, "claimed out of enqueue order");
}

#[tokio::test(flavor = "multi_thread")]
async fn enqueue_batch_of_ten_thousand() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let store = open(&dir.path().join("bulk.db"), clock.clone()).await;
    consumer(&store, &clock, "worker", "order.*").await;

    let out = store
        .enqueue_batch((0..N).map(message).collect())
        .await
        .unwrap();
    assert_eq!(out.len(), N);
    assert!(out.iter().all(|e| e.deliveries == 1 && !e.duplicate));
    assert_eq!(store.stats().await.unwrap().pending, N as u64);

    clock.advance(Duration::from_secs(1));
    let seen = drain(&store).await;
    check_drained(&seen);
    assert_eq!(store.stats().await.unwrap().succeeded, N as u64);
}

#[tokio::test(flavor = "multi_thread")]
async fn enqueue_in_ten_thousand_times_in_one_caller_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bulk.db");
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "worker", "order.*").await;

    let mut conn = Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    for i in 0..N {
        let e = store.enqueue_in(&tx, message(i)).unwrap();
        assert_eq!(e.deliveries, 1);
    }
    assert_eq!(
        store.stats().await.unwrap().total(),
        0,
        "nothing visible before commit"
    );
    tx.commit().unwrap();
    store.notify();
    assert_eq!(store.stats().await.unwrap().pending, N as u64);

    let seen = drain(&store).await;
    check_drained(&seen);
}
