//! A database made by schema version 5 (deliveries with AUTOINCREMENT and the ledger index)
//! with deliveries in every status upgrades in place to version 6: every delivery and
//! attempt row keeps every value (created_at becomes its message's, which the store always
//! wrote), the listing order is the same, new rows continue the sequence, and the
//! unfinished rows are claimable as before.

use outboxkit_core::{
    ClaimRequest, Clock, ConsumerName, DeliveryFilter, DeliveryId, DeliveryStore, Ledger,
    MessageStore, NewMessage, PageRequest, TenantId,
};
use rusqlite::Connection;

use crate::common::{file_at_version, open, rows_of, succeeded, LEASE};

const STATUSES: &[&str] = &[
    "pending",
    "held",
    "processing",
    "sending",
    "succeeded",
    "dead",
];

/// Every column of every delivery but `created_at`, in `seq` order, as text.
fn deliveries(conn: &Connection) -> Vec<Vec<String>> {
    rows_of(
        conn,
        "SELECT seq, id, message_id, tenant, topic, ordering_key, kind, target, status, \
                attempts, snoozes, next_attempt_at, lease_until, claim_token, claimed_from, \
                last_outcome, last_status_code, last_excerpt, last_at, dead_reason, \
                updated_at, completed_at, attempt_count, run, due_at \
         FROM outbox_deliveries ORDER BY seq",
    )
}

fn attempts(conn: &Connection) -> Vec<(i64, i64, String, Option<String>)> {
    conn.prepare(
        "SELECT delivery_seq, number, outcome, excerpt FROM outbox_attempts \
         ORDER BY delivery_seq, number",
    )
    .unwrap()
    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// A version-5 file: the shipped migrations 1–5, two messages, one delivery in each status
/// of each message (ids ordered within a message; the second message is newer), a deleted
/// newest row (so AUTOINCREMENT had moved past the highest seq), attempts on the finished
/// ones, and expired leases on the claimed ones.
fn version_five(path: &std::path::Path, now: i64) {
    let conn = file_at_version(path, 5, now);
    for (mi, created) in [(1, now - 20_000), (2, now - 10_000)] {
        let mid = format!("0190c000-0000-7000-8000-00000000000{mi}");
        conn.execute(
            "INSERT INTO outbox_messages (id, tenant, topic, payload, available_at, created_at) \
             VALUES (?1, 'acme', 'order.created', X'7b7d', ?2, ?2)",
            (&mid, created),
        )
        .unwrap();
        for (n, status) in STATUSES.iter().enumerate() {
            let claimed = matches!(*status, "processing" | "sending");
            let finished = matches!(*status, "succeeded" | "dead");
            let due = match *status {
                "held" => 253_402_300_799_999,
                "processing" | "sending" => now - 1,
                _ => now - 5_000 + n as i64,
            };
            conn.execute(
                "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, kind, target, \
                     status, attempts, snoozes, next_attempt_at, lease_until, claim_token, \
                     claimed_from, dead_reason, created_at, updated_at, completed_at, \
                     attempt_count, due_at, last_outcome, last_at) \
                 VALUES (?1, ?2, 'acme', 'order.created', 'handler', 'worker', ?3, ?4, 0, ?5, \
                         ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13, ?14, ?15)",
                rusqlite::params![
                    format!("0190c000-0000-7000-8000-0000000{mi}{n:04}"),
                    mid,
                    status,
                    i64::from(finished || claimed),
                    due,
                    claimed.then_some(due),
                    claimed.then_some("00000000-0000-4000-8000-000000000000"),
                    claimed.then_some("pending"),
                    (*status == "dead").then_some("max_attempts"),
                    created,
                    finished.then_some(now - 1_000),
                    i64::from(finished),
                    claimed.then_some(now - 60_000),
                    finished.then_some("handler-error"),
                    finished.then_some(now - 1_000),
                ],
            )
            .unwrap();
            if finished {
                conn.execute(
                    "INSERT INTO outbox_attempts (delivery_seq, number, probe, started_at, \
                         finished_at, outcome, excerpt, run, scheduled_at) \
                     VALUES (last_insert_rowid(), 1, 0, ?1, ?1, 'handler-error', ?2, 1, ?1)",
                    rusqlite::params![now - 2_000, format!("{mi}/{status}")],
                )
                .unwrap();
            }
        }
    }
    // A newest row deleted: version 5's AUTOINCREMENT kept its number; version 6 does not
    // need to (the sequence only has to exceed every row that exists).
    conn.execute(
        "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, kind, target, status, \
             attempts, snoozes, next_attempt_at, created_at, updated_at) \
         VALUES ('0190c000-0000-7000-8000-0000000fffff', ?1, 'acme', 'order.created', \
                 'handler', 'gone', 'pending', 0, 0, ?2, ?2, ?2)",
        ("0190c000-0000-7000-8000-000000000002", now),
    )
    .unwrap();
    conn.execute(
        "DELETE FROM outbox_deliveries WHERE id = '0190c000-0000-7000-8000-0000000fffff'",
        [],
    )
    .unwrap();
}

#[tokio::test]
async fn a_version_five_database_with_every_status_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.db");
    let clock = outboxkit_testing::ManualClock::new();
    let now = clock.now().as_unix_millis();
    version_five(&path, now);
    let (rows_before, attempts_before) = {
        let conn = Connection::open(&path).unwrap();
        (deliveries(&conn), attempts(&conn))
    };
    assert_eq!(rows_before.len(), 2 * STATUSES.len());

    let store = open(&path, clock.clone()).await;
    let acme = TenantId::new("acme").unwrap();
    {
        let conn = Connection::open(&path).unwrap();
        assert_eq!(deliveries(&conn), rows_before, "every value kept");
        assert_eq!(attempts(&conn), attempts_before, "every attempt kept");
        let table: String = conn
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE name = 'outbox_deliveries'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!table.contains("AUTOINCREMENT"), "{table}");
        let sequences: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_sequence", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sequences, 0);
        let ledger: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'outbox_deliveries_ledger'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(ledger, 0, "the ledger index is gone");
        assert!(conn
            .prepare("PRAGMA foreign_key_check")
            .unwrap()
            .query([])
            .unwrap()
            .next()
            .unwrap()
            .is_none());
    }

    // The listing: newest message first, its deliveries by id descending, in pages.
    let mut listed: Vec<DeliveryId> = Vec::new();
    let mut page = PageRequest::first(5);
    loop {
        let p = store
            .list_deliveries(&acme, &DeliveryFilter::default(), page)
            .await
            .unwrap();
        listed.extend(p.items.iter().map(|d| d.id));
        match p.next {
            Some(c) => {
                page = PageRequest {
                    limit: 5,
                    cursor: Some(c),
                }
            }
            None => break,
        }
    }
    let mut expected: Vec<DeliveryId> = rows_before
        .iter()
        .map(|r| DeliveryId::parse(&r[1]).unwrap())
        .collect();
    expected.reverse();
    assert_eq!(listed, expected);

    // The unfinished rows are claimable as before (held waits: its due time is the far
    // future), and completing them writes the next attempt numbers.
    let request = ClaimRequest::new(100, LEASE).handler(ConsumerName::new("worker").unwrap(), 10);
    let got = store.claim(&request).await.unwrap();
    assert_eq!(
        got.len(),
        2 * 3,
        "pending, processing and sending of each message"
    );
    let items: Vec<_> = got.iter().map(succeeded).collect();
    for r in store.complete_many(&items).await.unwrap() {
        r.unwrap();
    }

    // A new message's delivery continues after the highest row.
    crate::common::consumer(&store, &clock, "worker", "*").await;
    store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})).tenant("acme"))
        .await
        .unwrap();
    let conn = Connection::open(&path).unwrap();
    let (max_before, newest): (i64, i64) = (
        rows_before
            .iter()
            .map(|r| r[0].parse::<i64>().unwrap())
            .max()
            .unwrap(),
        conn.query_row("SELECT max(seq) FROM outbox_deliveries", [], |r| r.get(0))
            .unwrap(),
    );
    assert_eq!(newest, max_before + 1);
}
