//! `enqueue_in`: the message exists if and only if the caller's transaction commits.

use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{DeliveryStore, ErrorKind, Ledger, MessageStore, NewMessage, TenantId};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::ManualClock;
use rusqlite::{Connection, TransactionBehavior};

use crate::common::{claim_for, consumer, open, open_with, succeeded};

fn app_connection(path: &std::path::Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")
        .unwrap();
    conn
}

fn orders(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_transaction_keeps_the_message_and_wakes_on_notify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "mailer", "order.*").await;
    let mut listener = store.wake_listener().expect("sqlite wakes listeners");

    let mut conn = app_connection(&path);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (42)", [])
        .unwrap();
    let e = store
        .enqueue_in(
            &tx,
            NewMessage::new("order.created", serde_json::json!({"id": 42})),
        )
        .unwrap();
    assert_eq!((e.deliveries, e.duplicate), (1, false));
    // Not visible to the store's own connections before the commit.
    let before = store.get_message(&TenantId::default(), e.message_id).await;
    assert_eq!(before.unwrap_err().kind(), ErrorKind::NotFound);
    tx.commit().unwrap();
    store.notify();
    tokio::time::timeout(Duration::from_secs(10), listener.woken())
        .await
        .expect("notify after commit wakes the listener");

    assert_eq!(orders(&conn), 1);
    let m = store
        .get_message(&TenantId::default(), e.message_id)
        .await
        .unwrap();
    assert_eq!(m.json().unwrap()["id"], 42);
    let claimed = store.claim(&claim_for("mailer", 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].message.id, e.message_id);
    let results = store
        .complete_many(&[succeeded(&claimed[0])])
        .await
        .unwrap();
    assert!(results[0].is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn rolled_back_transaction_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "mailer", "*").await;

    let mut conn = app_connection(&path);
    let tx = conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (7)", [])
        .unwrap();
    let e = store
        .enqueue_in(&tx, NewMessage::new("order.created", serde_json::json!(7)))
        .unwrap();
    assert_eq!(e.deliveries, 1);
    tx.rollback().unwrap();

    assert_eq!(orders(&conn), 0);
    let m = store.get_message(&TenantId::default(), e.message_id).await;
    assert_eq!(m.unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(store.stats().await.unwrap().total(), 0);
    assert!(store
        .claim(&claim_for("mailer", 10))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_message_fails_without_touching_the_callers_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "mailer", "*").await;

    let mut conn = app_connection(&path);
    let tx = conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id) VALUES (1)", [])
        .unwrap();
    let batch = vec![
        NewMessage::new("order.created", serde_json::json!(1)),
        NewMessage::new("Not A Topic", serde_json::json!(2)),
    ];
    let err = store.enqueue_batch_in(&tx, batch).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(err.field(), Some("topic"));
    // The caller's own write is still there and the transaction still commits.
    tx.commit().unwrap();
    assert_eq!(orders(&conn), 1);
    assert_eq!(store.stats().await.unwrap().total(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicates_in_one_caller_transaction_return_the_first_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "mailer", "*").await;

    let mut conn = app_connection(&path);
    let tx = conn.transaction().unwrap();
    let m = || NewMessage::new("order.created", serde_json::json!(1)).idempotency_key("order-1");
    let out = store.enqueue_batch_in(&tx, vec![m(), m()]).unwrap();
    let again = store.enqueue_in(&tx, m()).unwrap();
    tx.commit().unwrap();
    assert!(!out[0].duplicate && out[1].duplicate && again.duplicate);
    assert_eq!(out[1].message_id, out[0].message_id);
    assert_eq!(again.message_id, out[0].message_id);
    assert_eq!(store.stats().await.unwrap().pending, 1);
    // The store's own enqueue sees the committed key too.
    let later = store.enqueue(m()).await.unwrap();
    assert!(later.duplicate);
    assert_eq!(later.message_id, out[0].message_id);
}

#[tokio::test(flavor = "multi_thread")]
async fn handles_on_one_file_share_wake_ups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let clock = ManualClock::new();
    let dispatcher_side = open(&path, clock.clone()).await;
    let app_side = open(&path, clock.clone()).await;
    consumer(&app_side, &clock, "mailer", "*").await;
    let mut listener = dispatcher_side.wake_listener().unwrap();
    app_side
        .enqueue(NewMessage::new("order.created", serde_json::json!(1)))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), listener.woken())
        .await
        .expect("an enqueue through another handle on the same file wakes the listener");
}

#[tokio::test(flavor = "multi_thread")]
async fn in_memory_store_round_trip() {
    let clock = ManualClock::new();
    let store = open_with(SqliteConfig::in_memory(), clock.clone()).await;
    consumer(&store, &clock, "mailer", "*").await;
    let e = store
        .enqueue(NewMessage::new("order.created", serde_json::json!(1)))
        .await
        .unwrap();
    let claimed = store.claim(&claim_for("mailer", 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].message.id, e.message_id);
    store
        .complete_many(&[succeeded(&claimed[0])])
        .await
        .unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(store.stats().await.unwrap().succeeded, 1);
    // A second in-memory store is a different database.
    let other = SqliteStore::open(
        SqliteConfig::in_memory(),
        clock,
        std::sync::Arc::new(outboxkit_core::OsEntropy),
    )
    .await
    .unwrap();
    assert_eq!(other.stats().await.unwrap().total(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn full_synchronous_and_no_readers_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let mut config = SqliteConfig::new(dir.path().join("full.db"));
    config.synchronous = outboxkit_sqlite::Synchronous::Full;
    config.readers = 0;
    let store = open_with(config, clock.clone()).await;
    consumer(&store, &clock, "mailer", "*").await;
    let e = store
        .enqueue(NewMessage::new("order.created", serde_json::json!(1)))
        .await
        .unwrap();
    let m = store
        .get_message(&TenantId::default(), e.message_id)
        .await
        .unwrap();
    assert_eq!(m.id, e.message_id);
    assert_eq!(
        store.claim(&claim_for("mailer", 10)).await.unwrap().len(),
        1
    );
}
