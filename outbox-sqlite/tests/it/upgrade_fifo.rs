//! A version-7 file with a keyed backlog upgrades in place to the newest version (with
//! `0009_fifo.sql`, strict FIFO per endpoint): the unfinished rows take their ordering key
//! as their barrier, so the per-key order holds across the upgrade.

use outboxkit_core::{Clock, DeliveryStore, DeliveryStoreExt};
use rusqlite::Connection;

use crate::common::{claim_for, file_at_version, open, succeeded};

/// A version-7 file: migrations 1–7, one message of key `k` with three deliveries to the
/// consumer `worker` (succeeded, then two pending) and one unkeyed pending one.
fn version_seven(path: &std::path::Path, now: i64) {
    let conn = file_at_version(path, 7, now);
    let mid = "0190c000-0000-7000-8000-000000000001";
    conn.execute(
        "INSERT INTO outbox_messages (id, tenant, topic, payload, ordering_key, available_at, \
             created_at) VALUES (?1, 'acme', 'order.created', X'7b7d', 'k', ?2, ?2)",
        (mid, now - 10_000),
    )
    .unwrap();
    for (n, (status, key)) in [
        ("succeeded", Some("k")),
        ("pending", Some("k")),
        ("pending", Some("k")),
        ("pending", None),
    ]
    .into_iter()
    .enumerate()
    {
        let done = status == "succeeded";
        conn.execute(
            "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, ordering_key, kind, \
                 target, status, attempts, snoozes, next_attempt_at, created_at, updated_at, \
                 completed_at) \
             VALUES (?1, ?2, 'acme', 'order.created', ?3, 'handler', 'worker', ?4, ?5, 0, ?6, \
                     ?6, ?6, ?7)",
            rusqlite::params![
                format!("0190c000-0000-7000-8000-00000001{n:04}"),
                mid,
                key,
                status,
                i64::from(done),
                now - 5_000 + n as i64,
                done.then_some(now - 1_000),
            ],
        )
        .unwrap();
    }
}

#[tokio::test]
async fn a_version_7_file_keeps_its_key_order_through_the_fifo_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.db");
    let clock = outboxkit_testing::ManualClock::new();
    version_seven(&path, clock.now().as_unix_millis());
    let store = open(&path, clock.clone()).await;
    let version: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT max(version) FROM outbox_schema_version", [], |r| {
            r.get(0)
        })
        .unwrap();
    let newest = outboxkit_sqlite::migrations()
        .iter()
        .map(|m| m.version)
        .max();
    assert_eq!(Some(version), newest);
    // The first pending row of `k` and the unkeyed one; the second of `k` waits.
    let first = store.claim(&claim_for("worker", 10)).await.unwrap();
    let ids: Vec<String> = first.iter().map(|c| c.delivery.id.to_string()).collect();
    assert_eq!(
        ids,
        [
            "0190c000-0000-7000-8000-000000010001",
            "0190c000-0000-7000-8000-000000010003"
        ]
    );
    for c in &first {
        let (lease, done) = succeeded(c);
        store.complete(&lease, &done).await.unwrap();
    }
    let next = store.claim(&claim_for("worker", 10)).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(
        next[0].delivery.id.to_string(),
        "0190c000-0000-7000-8000-000000010002"
    );
}
