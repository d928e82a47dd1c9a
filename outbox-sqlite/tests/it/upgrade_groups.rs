//! A database made by schema version 14 (the claim and barrier indexes keyed by the text
//! columns tenant, kind, target; an index of deliveries by message) with deliveries in every
//! status upgrades in place to version 15: every delivery and attempt row keeps every value
//! and carries the id of its (tenant, kind, target) group, each message records its
//! deliveries' `seq` range, and the listing, the claim, the per-key barrier, cancelling and
//! the purge read the same rows as before. Two stores opening the file at once migrate it once.

use outboxkit_core::{
    ClaimRequest, Clock, ConsumerName, DeliveryFilter, DeliveryId, DeliveryStore, Ledger,
    LedgerExt, MessageId, MessageStore, NewMessage, OperatorStore, PageRequest, TenantId,
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

const ENDPOINT: &str = "0190c000-0000-7000-8000-0000000000ee";

/// Every column of every delivery, in `seq` order, as text.
fn deliveries(conn: &Connection) -> Vec<Vec<String>> {
    rows_of(
        conn,
        "SELECT seq, id, message_id, tenant, topic, ordering_key, kind, target, status, \
                attempts, snoozes, next_attempt_at, lease_until, claim_token, claimed_from, \
                last_outcome, last_status_code, last_excerpt, last_at, dead_reason, created_at, \
                updated_at, completed_at, attempt_count, run, due_at, barrier \
         FROM outbox_deliveries ORDER BY seq",
    )
}

fn attempts(conn: &Connection) -> Vec<Vec<String>> {
    rows_of(
        conn,
        "SELECT delivery_seq, number, probe, started_at, finished_at, outcome, status_code, \
                excerpt, run, scheduled_at, detail \
         FROM outbox_attempts ORDER BY delivery_seq, number",
    )
}

fn one(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn message(n: u32) -> String {
    format!("0190c000-0000-7000-8000-00000000000{n}")
}

/// A version-14 file: the shipped migrations 1–14; message 1 (tenant `acme`) with one
/// delivery in each status, spread over a handler, a webhook endpoint and an e-mail
/// recipient, attempts on the finished ones and expired leases on the claimed ones; message
/// 2 (tenant `beta`) with two deliveries under the ordering key `k`; message 3 with none.
fn version_fourteen(path: &std::path::Path, now: i64) {
    let conn = file_at_version(path, 14, now);
    let insert_message = |n: u32, tenant: &str, created: i64, key: Option<&str>| {
        conn.execute(
            "INSERT INTO outbox_messages (id, tenant, topic, payload, ordering_key, \
                 available_at, created_at) \
             VALUES (?1, ?2, 'order.created', X'7b7d', ?3, ?4, ?4)",
            rusqlite::params![message(n), tenant, key, created],
        )
        .unwrap();
    };
    let created = now - 20_000;
    insert_message(1, "acme", created, None);
    for (n, status) in STATUSES.iter().enumerate() {
        let claimed = matches!(*status, "processing" | "sending");
        let finished = matches!(*status, "succeeded" | "dead");
        let due = match *status {
            "held" => 253_402_300_799_999,
            "processing" | "sending" => now - 1,
            _ => now - 5_000 + n as i64,
        };
        let (kind, target) = match *status {
            "held" => ("webhook", ENDPOINT),
            "dead" => ("email", "ops@example.com"),
            _ => ("handler", "worker"),
        };
        conn.execute(
            "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, kind, target, \
                 status, attempts, snoozes, next_attempt_at, lease_until, claim_token, \
                 claimed_from, dead_reason, created_at, updated_at, completed_at, \
                 attempt_count, due_at, last_outcome, last_at) \
             VALUES (?1, ?2, 'acme', 'order.created', ?3, ?4, ?5, ?6, 0, ?7, \
                     ?8, ?9, ?10, ?11, ?12, ?12, ?13, ?14, ?15, ?16, ?17)",
            rusqlite::params![
                format!("0190c000-0000-7000-8000-00000001{n:04}"),
                message(1),
                kind,
                target,
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
                     finished_at, outcome, excerpt, run, scheduled_at, detail) \
                 VALUES (last_insert_rowid(), 1, 0, ?1, ?1, 'handler-error', ?2, 1, ?1, '{}')",
                rusqlite::params![now - 2_000, format!("1/{status}")],
            )
            .unwrap();
        }
    }
    insert_message(2, "beta", now - 10_000, Some("k"));
    for n in 0..2 {
        conn.execute(
            "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, ordering_key, kind, \
                 target, status, attempts, snoozes, next_attempt_at, created_at, updated_at, \
                 barrier) \
             VALUES (?1, ?2, 'beta', 'order.created', 'k', 'handler', ?3, 'pending', 0, 0, \
                     ?4, ?5, ?5, 'k')",
            rusqlite::params![
                format!("0190c000-0000-7000-8000-00000002{n:04}"),
                message(2),
                // The same key to two consumers: each group orders its own.
                ["worker", "audit"][n],
                now - 4_000,
                now - 10_000,
            ],
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, ordering_key, kind, \
             target, status, attempts, snoozes, next_attempt_at, created_at, updated_at, \
             barrier) \
         VALUES ('0190c000-0000-7000-8000-000000029999', ?1, 'beta', 'order.created', 'k', \
                 'handler', 'worker', 'pending', 0, 0, ?2, ?3, ?3, 'k')",
        rusqlite::params![message(2), now - 4_500, now - 10_000],
    )
    .unwrap();
    insert_message(3, "acme", now - 30_000, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_fourteen_database_with_every_status_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v14.db");
    let clock = outboxkit_testing::ManualClock::new();
    let now = clock.now().as_unix_millis();
    version_fourteen(&path, now);
    let (rows_before, attempts_before) = {
        let conn = Connection::open(&path).unwrap();
        (deliveries(&conn), attempts(&conn))
    };
    assert_eq!(rows_before.len(), STATUSES.len() + 3);
    let acme = TenantId::new("acme").unwrap();
    let beta = TenantId::new("beta").unwrap();

    // Two stores open it at once: one migrates, the other finds it done.
    let (a, b) = tokio::join!(open(&path, clock.clone()), open(&path, clock.clone()));
    drop(b);
    let store = a;
    {
        let conn = Connection::open(&path).unwrap();
        assert_eq!(deliveries(&conn), rows_before, "every value kept");
        assert_eq!(attempts(&conn), attempts_before, "every attempt kept");
        assert_eq!(
            one(
                &conn,
                "SELECT count(*) FROM outbox_schema_version WHERE version = 15"
            ),
            1
        );
        assert_eq!(
            one(&conn, "SELECT count(*) FROM outbox_groups"),
            5,
            "acme's worker, endpoint and recipient; beta's worker and audit"
        );
        assert_eq!(
            one(
                &conn,
                "SELECT count(*) FROM outbox_deliveries AS d \
                 LEFT JOIN outbox_groups AS g ON g.id = d.grp \
                 WHERE g.id IS NULL OR g.tenant <> d.tenant OR g.kind <> d.kind \
                    OR g.target <> d.target"
            ),
            0,
            "every delivery carries its own group's id"
        );
        let ranges = rows_of(
            &conn,
            "SELECT id, first_seq, last_seq FROM outbox_messages ORDER BY id",
        );
        assert_eq!(
            ranges,
            vec![
                vec![message(1), "1".into(), "6".into()],
                vec![message(2), "7".into(), "9".into()],
                vec![message(3), "NULL".into(), "NULL".into()],
            ],
            "each message's deliveries' seq range"
        );
        assert_eq!(
            one(
                &conn,
                "SELECT count(*) FROM sqlite_schema WHERE name = 'outbox_deliveries_message'"
            ),
            0,
            "the message index is gone"
        );
        assert_eq!(
            one(
                &conn,
                "SELECT count(*) FROM pragma_foreign_key_list('outbox_deliveries')"
            ),
            0,
            "no foreign key from a delivery to its message"
        );
        assert_eq!(
            one(
                &conn,
                "SELECT count(*) FROM pragma_foreign_key_list('outbox_attempts') \
                 WHERE \"table\" = 'outbox_deliveries'"
            ),
            1,
            "an attempt still names its delivery"
        );
        assert!(conn
            .prepare("PRAGMA foreign_key_check")
            .unwrap()
            .query([])
            .unwrap()
            .next()
            .unwrap()
            .is_none());
        let ok: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        // A message's deliveries are read as a rowid range, not by a scan.
        let plan = rows_of(
            &conn,
            "EXPLAIN QUERY PLAN SELECT d.id FROM outbox_messages AS m \
             JOIN outbox_deliveries AS d \
               ON d.seq BETWEEN m.first_seq AND m.last_seq AND d.message_id = m.id \
             WHERE m.tenant = 'acme'",
        );
        assert!(
            plan.iter()
                .any(|r| r[3].contains("d USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)")),
            "{plan:?}"
        );
    }

    // The listing: newest message first, its deliveries by id descending.
    let listed = |t: TenantId| {
        let store = store.clone();
        async move {
            store
                .list_deliveries(&t, &DeliveryFilter::default(), PageRequest::first(100))
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|d| d.id)
                .collect::<Vec<DeliveryId>>()
        }
    };
    let expected = |range: std::ops::Range<usize>| {
        let mut ids: Vec<DeliveryId> = rows_before[range]
            .iter()
            .map(|r| DeliveryId::parse(&r[1]).unwrap())
            .collect();
        ids.sort();
        ids.reverse();
        ids
    };
    assert_eq!(listed(acme.clone()).await, expected(0..6));
    assert_eq!(listed(beta.clone()).await, expected(6..9));

    // The claim: acme's pending, processing and sending (leases expired); of beta's key
    // `k`, the first unfinished per group only (worker: 0002_9999 is due first but later in
    // order; its group's first by seq is 0002_0000).
    let request = ClaimRequest::new(100, LEASE)
        .handler(ConsumerName::new("worker").unwrap(), 10)
        .handler(ConsumerName::new("audit").unwrap(), 10);
    let got = store.claim(&request).await.unwrap();
    let mut claimed: Vec<String> = got.iter().map(|c| c.delivery.id.to_string()).collect();
    claimed.sort();
    assert_eq!(
        claimed,
        [
            "0190c000-0000-7000-8000-000000010000",
            "0190c000-0000-7000-8000-000000010002",
            "0190c000-0000-7000-8000-000000010003",
            "0190c000-0000-7000-8000-000000020000",
            "0190c000-0000-7000-8000-000000020001",
        ]
    );
    let items: Vec<_> = got.iter().map(succeeded).collect();
    for r in store.complete_many(&items).await.unwrap() {
        r.unwrap();
    }
    let next = store.claim(&request).await.unwrap();
    let next_ids: Vec<String> = next.iter().map(|c| c.delivery.id.to_string()).collect();
    assert_eq!(next_ids, ["0190c000-0000-7000-8000-000000029999"]);
    let items: Vec<_> = next.iter().map(succeeded).collect();
    for r in store.complete_many(&items).await.unwrap() {
        r.unwrap();
    }

    // Cancelling message 1 finds its one delivery left to cancel (held) through its range.
    let report = store
        .cancel_message(&acme, MessageId::parse(&message(1)).unwrap())
        .await
        .unwrap();
    assert_eq!((report.cancelled, report.skipped), (1, 5));

    // A new message records the range its deliveries took, after every row.
    crate::common::consumer(&store, &clock, "worker", "*").await;
    crate::common::consumer(&store, &clock, "audit", "*").await;
    let fresh = store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})).tenant("acme"))
        .await
        .unwrap();
    assert_eq!(fresh.deliveries, 2);
    {
        let conn = Connection::open(&path).unwrap();
        let range = rows_of(
            &conn,
            &format!(
                "SELECT first_seq, last_seq, (SELECT group_concat(seq) FROM outbox_deliveries \
                   WHERE message_id = m.id) FROM outbox_messages AS m WHERE id = '{}'",
                fresh.message_id
            ),
        );
        assert_eq!(
            range,
            vec![vec!["10".to_owned(), "11".into(), "10,11".into()]]
        );
        assert_eq!(
            one(&conn, "SELECT count(*) FROM outbox_groups"),
            6,
            "acme's audit is new; acme's worker is the group it had"
        );
    }
    let got = store.claim(&request).await.unwrap();
    assert_eq!(got.len(), 2);
    let items: Vec<_> = got.iter().map(succeeded).collect();
    for r in store.complete_many(&items).await.unwrap() {
        r.unwrap();
    }

    // The purge, past everything: every finished delivery and then every message without
    // deliveries left (message 3 had none from the start) goes.
    clock.advance(std::time::Duration::from_secs(3600));
    let before = clock.now();
    let mut removed = (0, 0);
    for _ in 0..10 {
        let r = store.purge_completed(before, 100).await.unwrap();
        removed.0 += r.deliveries;
        removed.1 += r.messages;
        if r.deliveries == 0 && r.messages == 0 {
            break;
        }
    }
    assert_eq!(removed, (11, 4), "11 deliveries, 4 messages");
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.total(), 0, "{stats:?}");
    let conn = Connection::open(&path).unwrap();
    assert_eq!(one(&conn, "SELECT count(*) FROM outbox_messages"), 0);
}
