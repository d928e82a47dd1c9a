//! A database made by schema version 3 (the version before the claim path moved to integer
//! keys and per-group claim order) with deliveries in every status upgrades in place to
//! version 4: every row survives as it was, the unfinished ones are claimable as before
//! (the ordering barrier included), the finished ones stay finished with their attempts,
//! and new attempts continue the old numbering.

use std::collections::BTreeMap;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    AttemptDetail, AttemptOutcome, AttemptRecord, ClaimRequest, Clock, Completion, ConsumerName,
    DeliveryId, DeliveryStatus, DeliveryStore, EndpointId, EndpointStore, EndpointUpdate, Ledger,
    TenantId, Verdict,
};
use rusqlite::Connection;

use crate::common::{file_at_version, open, LEASE};

const MESSAGE: &str = "0190b000-0000-7000-8000-000000000001";
const ENDPOINT: &str = "0190b000-0000-7000-8000-0000000000e1";

/// A delivery of the old file: id, kind, target, status, attempts, ordering key, attempt
/// rows.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    i64,
    Option<&'static str>,
    i64,
);

/// The deliveries of the old file.
const ROWS: &[Row] = &[
    (
        "0190b000-0000-7000-8000-000000000011",
        "handler",
        "worker",
        "pending",
        0,
        None,
        0,
    ),
    (
        "0190b000-0000-7000-8000-000000000012",
        "handler",
        "worker",
        "processing",
        1,
        None,
        0,
    ),
    (
        "0190b000-0000-7000-8000-000000000013",
        "email",
        "a@example.com",
        "sending",
        1,
        None,
        0,
    ),
    (
        "0190b000-0000-7000-8000-000000000014",
        "webhook",
        ENDPOINT,
        "held",
        0,
        None,
        0,
    ),
    (
        "0190b000-0000-7000-8000-000000000015",
        "handler",
        "worker",
        "succeeded",
        1,
        None,
        1,
    ),
    (
        "0190b000-0000-7000-8000-000000000016",
        "handler",
        "worker",
        "dead",
        2,
        None,
        2,
    ),
    (
        "0190b000-0000-7000-8000-000000000017",
        "handler",
        "worker",
        "pending",
        1,
        Some("k"),
        1,
    ),
    (
        "0190b000-0000-7000-8000-000000000018",
        "handler",
        "worker",
        "pending",
        0,
        Some("k"),
        0,
    ),
];

fn id(i: usize) -> DeliveryId {
    DeliveryId::parse(ROWS[i].0).unwrap()
}

/// Write a version-3 file with the shipped migrations 1–3 and the rows above, as version 3
/// left them: claimed rows with an expired lease, a paused endpoint's delivery held, the
/// finished ones completed with their attempts.
fn version_three(path: &std::path::Path, now: i64) {
    let conn = file_at_version(path, 3, now);
    conn.execute(
        "INSERT INTO outbox_messages (id, tenant, topic, payload, available_at, created_at) \
         VALUES (?1, 'acme', 'order.created', X'7b7d', ?2, ?2)",
        (MESSAGE, now - 10_000),
    )
    .unwrap();
    conn.execute(
        "INSERT INTO outbox_endpoints (id, tenant, url, description, filter, status, secret, \
                                       body_format, created_at, updated_at) \
         VALUES (?1, 'acme', 'https://hooks.example.com/in', '', '*', 'paused', X'01', \
                 'envelope', ?2, ?2)",
        (ENDPOINT, now - 10_000),
    )
    .unwrap();
    for (n, &(id, kind, target, status, attempts, key, attempt_rows)) in ROWS.iter().enumerate() {
        let claimed = matches!(status, "processing" | "sending");
        let finished = matches!(status, "succeeded" | "dead");
        let due = match status {
            "held" => 253_402_300_799_999,
            "processing" | "sending" => now - 1, // the lease ran out
            _ => now - 5_000 + n as i64,
        };
        conn.execute(
            "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, ordering_key, kind, \
                 target, status, attempts, snoozes, next_attempt_at, lease_until, claim_token, \
                 claimed_from, dead_reason, created_at, updated_at, completed_at, \
                 attempt_count, due_at) \
             VALUES (?1, ?2, 'acme', 'order.created', ?3, ?4, ?5, ?6, ?7, 0, ?8, ?9, ?10, ?11, \
                     ?12, ?13, ?13, ?14, ?15, ?16)",
            rusqlite::params![
                id,
                MESSAGE,
                key,
                kind,
                target,
                status,
                attempts,
                due,
                claimed.then_some(due),
                claimed.then_some("00000000-0000-4000-8000-000000000000"),
                claimed.then_some("pending"),
                (status == "dead").then_some("max_attempts"),
                now - 10_000 + n as i64,
                finished.then_some(now - 1_000),
                attempt_rows,
                claimed.then_some(now - 60_000),
            ],
        )
        .unwrap();
        for a in 1..=attempt_rows {
            conn.execute(
                "INSERT INTO outbox_attempts (delivery_id, number, probe, started_at, \
                     finished_at, outcome, status_code, excerpt, run, scheduled_at) \
                 VALUES (?1, ?2, 0, ?3, ?3, 'handler-error', NULL, ?4, 1, ?3)",
                rusqlite::params![id, a, now - 9_000 + a, format!("attempt {a}")],
            )
            .unwrap();
        }
    }
}

#[tokio::test]
async fn a_version_three_database_with_every_status_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.db");
    let clock = outboxkit_testing::ManualClock::new();
    let now = clock.now().as_unix_millis();
    version_three(&path, now);
    let before: Vec<(String, String, i64, i64)> = {
        let conn = Connection::open(&path).unwrap();
        let mut stmt = conn
            .prepare(
                "SELECT id, status, attempts, next_attempt_at FROM outbox_deliveries ORDER BY seq",
            )
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };

    let store = open(&path, clock.clone()).await;
    let acme = TenantId::new("acme").unwrap();

    // Every row as it was, and every attempt.
    for (i, (_, status, attempts, due)) in before.iter().enumerate() {
        let d = store
            .get_delivery(&acme, id(i))
            .await
            .expect("the delivery");
        assert_eq!(d.status.as_str(), status);
        assert_eq!(i64::from(d.attempts), *attempts);
        assert_eq!(d.next_attempt_at.as_unix_millis(), *due);
        let attempts = store.attempts(&acme, id(i)).await.expect("its attempts");
        assert_eq!(attempts.len() as i64, ROWS[i].6);
        for (n, a) in attempts.iter().enumerate() {
            assert_eq!(a.number as usize, n + 1);
            assert_eq!(
                a.record.excerpt.as_deref(),
                Some(&*format!("attempt {}", n + 1))
            );
            assert_eq!(a.record.detail, None, "an old attempt has no detail");
        }
    }

    // The unfinished rows are claimable as before: the pending one, the two whose lease ran
    // out (from where they were claimed), the head of key `k` but not the row behind it;
    // the paused endpoint's row waits.
    let request = ClaimRequest::new(10, LEASE)
        .handler(ConsumerName::new("worker").unwrap(), 10)
        .email(5)
        .webhooks(5);
    let got = store.claim(&request).await.expect("claim");
    let claimed: BTreeMap<DeliveryId, DeliveryStatus> = got
        .iter()
        .map(|c| (c.delivery.id, c.lease.claimed_from))
        .collect();
    let expected: BTreeMap<DeliveryId, DeliveryStatus> = [
        (id(0), DeliveryStatus::Pending),
        (id(1), DeliveryStatus::Processing),
        (id(2), DeliveryStatus::Sending),
        (id(6), DeliveryStatus::Pending),
    ]
    .into_iter()
    .collect();
    assert_eq!(claimed, expected);

    // Completing them continues each delivery's attempt numbering.
    let at = clock.now();
    let detail = AttemptDetail {
        request_headers: vec![("webhook-id".into(), "msg_upgraded".into())],
        response_body: b"\xffok".to_vec(),
        ..AttemptDetail::default()
    };
    let record = AttemptRecord {
        detail: Some(Box::new(detail.clone())),
        started_at: at,
        finished_at: at,
        outcome: AttemptOutcome::Succeeded,
        status_code: None,
        excerpt: None,
    };
    let items: Vec<_> = got
        .iter()
        .map(|c| {
            (
                c.lease.clone(),
                Completion {
                    verdict: Verdict::Succeeded,
                    attempt: Some(record.clone()),
                },
            )
        })
        .collect();
    for r in store.complete_many(&items).await.expect("complete") {
        r.expect("each lease holds");
    }
    let keyed = store.attempts(&acme, id(6)).await.unwrap();
    assert_eq!(
        keyed
            .iter()
            .map(|a| (a.number, a.record.detail.as_deref()))
            .collect::<Vec<_>>(),
        vec![(1, None), (2, Some(&detail))],
        "the old attempt reads no detail, the new one keeps its own"
    );

    // Behind key `k`'s finished head, the next row; then the resumed endpoint's row.
    let next = store.claim(&request).await.expect("claim");
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].delivery.id, id(7));
    store
        .update_endpoint(
            &acme,
            EndpointId::parse(ENDPOINT).unwrap(),
            &EndpointUpdate {
                status: Some(outboxkit_core::EndpointStatus::Active),
                ..Default::default()
            },
        )
        .await
        .expect("resume");
    let held = store.claim(&request).await.expect("claim");
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].delivery.id, id(3));

    // The finished rows stay finished; nothing was lost.
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.total(), ROWS.len() as u64);
    assert_eq!(stats.count(DeliveryStatus::Dead), 1);
    assert_eq!(stats.count(DeliveryStatus::Succeeded), 5);
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("SELECT max(version) FROM outbox_schema_version", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, outboxkit_sqlite::SCHEMA_VERSION);
    let attempts: i64 = conn
        .query_row(
            // The ledger's rows and the first attempts kept in their finished rows (schema 16).
            "SELECT (SELECT count(*) FROM outbox_attempts) + (SELECT count(*) \
             FROM outbox_deliveries WHERE folded_started_at IS NOT NULL)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        attempts,
        4 + 4,
        "the four old attempts and the four new ones"
    );
}
