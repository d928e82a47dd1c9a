//! Fair claiming with a long backlog: 100,000 due deliveries of one tenant do not delay
//! another tenant's fresh delivery by more than one claim, and the backlog's rows still come
//! oldest first.

use outboxkit_core::{Clock, DeliveryStore, MessageStore, NewMessage};
use rusqlite::Connection;

use crate::common::{claim_for, consumer, open};

const BACKLOG: i64 = 100_000;
const MESSAGE: &str = "0190c000-0000-7000-8000-000000000001";

/// The ids of backlog rows `range` (row `i` is due `i` ms after the first).
fn ids(range: std::ops::Range<i64>) -> Vec<String> {
    range
        .map(|i| format!("0190c000-0000-7000-8000-{i:012}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_of_100k_does_not_delay_another_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fair.db");
    let clock = outboxkit_testing::ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "worker", "*").await;
    let now = clock.now().as_unix_millis();
    {
        // Tenant `a`'s backlog, written directly (the store's enqueue of 100k in a debug
        // build would dominate the test), all due before `b`'s message.
        let mut conn = Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        tx.execute(
            "INSERT INTO outbox_messages (id, tenant, topic, payload, available_at, created_at) \
             VALUES (?1, 'a', 'order.created', X'7b7d', ?2, ?2)",
            (MESSAGE, now - BACKLOG - 1),
        )
        .unwrap();
        // Every delivery carries its group's id (schema 15).
        tx.execute(
            "INSERT INTO outbox_groups (tenant, kind, target) VALUES ('a', 'handler', 'worker')",
            [],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, kind, target, status, \
                 attempts, snoozes, next_attempt_at, created_at, updated_at, grp) \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?3) \
             SELECT printf('0190c000-0000-7000-8000-%012d', i), ?1, 'a', 'order.created', \
                    'handler', 'worker', 'pending', 0, 0, ?2 - ?3 + i, ?2, ?2, \
                    (SELECT id FROM outbox_groups WHERE tenant = 'a') FROM n",
            (MESSAGE, now - 1, BACKLOG),
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let fresh = store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})).tenant("b"))
        .await
        .unwrap();

    let got = store.claim(&claim_for("worker", 10)).await.unwrap();
    assert_eq!(got.len(), 10);
    let tenants: Vec<&str> = got.iter().map(|c| c.delivery.tenant.as_str()).collect();
    assert_eq!(
        tenants,
        ["a", "b", "a", "a", "a", "a", "a", "a", "a", "a"],
        "round 1 takes each group's head, oldest first; then the backlog"
    );
    assert_eq!(got[1].message.id, fresh.message_id);
    let backlog: Vec<String> = got
        .iter()
        .filter(|c| c.delivery.tenant.as_str() == "a")
        .map(|c| c.delivery.id.to_string())
        .collect();
    assert_eq!(backlog, ids(1..10), "the backlog's oldest rows, in order");

    // The next claims drain the backlog in order.
    let next = store.claim(&claim_for("worker", 5)).await.unwrap();
    let next: Vec<String> = next.iter().map(|c| c.delivery.id.to_string()).collect();
    assert_eq!(next, ids(10..15));
}
