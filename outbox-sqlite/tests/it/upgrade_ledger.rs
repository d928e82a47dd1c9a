//! A database made by schema version 1 (with deliveries, attempts and an endpoint) upgrades
//! in place to the current schema with nothing lost.

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    AttemptOutcome, DeliveryId, DeliveryStatus, EndpointId, EndpointStore, ErrorClass, Ledger,
    PayloadFingerprint, TenantId,
};
use rusqlite::Connection;

use crate::common::open;

const V1: &str = include_str!("../../src/schema/0001_init.sql");
const MESSAGE: &str = "0190a000-0000-7000-8000-000000000001";
const DELIVERY: &str = "0190a000-0000-7000-8000-000000000002";
const ENDPOINT: &str = "0190a000-0000-7000-8000-000000000003";

/// Write a version-1 database by hand: the schema, its version row, one message, one dead
/// webhook delivery with two attempts, and its endpoint.
fn version_one(path: &std::path::Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(V1).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE outbox_schema_version (version INTEGER NOT NULL PRIMARY KEY, \
                                             applied_at INTEGER NOT NULL); \
         INSERT INTO outbox_schema_version VALUES (1, 1700000000000); \
         INSERT INTO outbox_messages (id, tenant, topic, payload, available_at, created_at) \
           VALUES ('{MESSAGE}', 'acme', 'order.created', X'7b226e223a317d', \
                   1700000000000, 1700000000000); \
         INSERT INTO outbox_endpoints (id, tenant, url, description, filter, status, secret, \
                                       body_format, created_at, updated_at) \
           VALUES ('{ENDPOINT}', 'acme', 'https://hooks.example.com/in', '', '*', 'active', \
                   X'01', 'envelope', 1700000000000, 1700000000000); \
         INSERT INTO outbox_deliveries (id, message_id, tenant, topic, kind, target, status, \
                                        attempts, snoozes, next_attempt_at, last_outcome, \
                                        last_status_code, last_excerpt, last_at, dead_reason, \
                                        created_at, updated_at, completed_at, attempt_count) \
           VALUES ('{DELIVERY}', '{MESSAGE}', 'acme', 'order.created', 'webhook', \
                   '{ENDPOINT}', 'dead', 2, 0, 1700000100000, 'response-5xx', 503, 'boom', \
                   1700000100000, 'max_attempts', 1700000000000, 1700000100000, \
                   1700000100000, 2); \
         INSERT INTO outbox_attempts VALUES \
           ('{DELIVERY}', 1, 0, 1700000000000, 1700000001000, 'response-5xx', 500, 'first'), \
           ('{DELIVERY}', 2, 0, 1700000099000, 1700000100000, 'response-5xx', 503, 'boom');"
    ))
    .unwrap();
}

#[tokio::test]
async fn a_version_one_database_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    version_one(&path);
    let clock = outboxkit_testing::ManualClock::new();
    let store = open(&path, clock.clone()).await;
    let acme = TenantId::new("acme").unwrap();
    let id = DeliveryId::parse(DELIVERY).unwrap();

    let d = store.get_delivery(&acme, id).await.expect("the delivery");
    assert_eq!((d.status, d.attempts, d.run), (DeliveryStatus::Dead, 2, 1));
    assert_eq!(d.last_outcome.expect("kept").status_code, Some(503));
    let attempts = store.attempts(&acme, id).await.expect("the attempts");
    let seen: Vec<_> = attempts
        .iter()
        .map(|a| {
            (
                a.number,
                a.run,
                a.scheduled_at,
                a.record.status_code,
                a.record.excerpt.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, 1, None, Some(500), Some("first".to_owned())),
            (2, 1, None, Some(503), Some("boom".to_owned())),
        ]
    );
    assert_eq!(attempts[0].payload, PayloadFingerprint::of(br#"{"n":1}"#));
    assert_eq!(
        attempts[0].record.outcome,
        AttemptOutcome::Failed(ErrorClass::Response5xx)
    );
    let e = store
        .get_endpoint(&acme, EndpointId::parse(ENDPOINT).unwrap())
        .await
        .expect("the endpoint");
    assert_eq!(e.last_delivery, None);

    // The upgraded rows take part in the new behaviour: a replay starts run 2.
    store.replay(&acme, id).await.expect("replay");
    assert_eq!(store.get_delivery(&acme, id).await.unwrap().run, 2);
    assert_eq!(store.attempts(&acme, id).await.unwrap().len(), 2);

    let conn = Connection::open(&path).unwrap();
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM outbox_schema_version ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, outboxkit_sqlite::MIGRATION_VERSIONS.to_vec());
}
