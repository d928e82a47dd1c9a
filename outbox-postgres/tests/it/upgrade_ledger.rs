//! A schema made by version 1 (with a delivery, its attempts and its endpoint) upgrades in
//! place to the current schema with nothing lost.

use std::sync::Arc;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    DeliveryId, DeliveryStatus, EndpointId, EndpointStore, Ledger, PayloadFingerprint, SystemClock,
    TenantId,
};
use outboxkit_postgres::sqlx;

use crate::support::with_db;

const V1: &str = include_str!("../../src/schema/0001_init.sql");
const MESSAGE: &str = "0190a000-0000-7000-8000-000000000001";
const DELIVERY: &str = "0190a000-0000-7000-8000-000000000002";
const ENDPOINT: &str = "0190a000-0000-7000-8000-000000000003";

#[tokio::test]
async fn a_version_one_schema_upgrades_in_place() {
    with_db(|db| async move {
        let s = format!("\"{}\"", db.schema);
        // What version 1's migrate() wrote, then rows as version 1 wrote them.
        let setup = format!(
            "CREATE SCHEMA {s}; \
             CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, \
                 name text NOT NULL, applied_at bigint NOT NULL); \
             {v1} \
             INSERT INTO {s}.schema_migrations VALUES (1, 'init', 1700000000000); \
             INSERT INTO {s}.messages (id, tenant, topic, payload, available_at, created_at) \
               VALUES ('{MESSAGE}', 'acme', 'order.created', '\\x7b226e223a317d', \
                       1700000000000, 1700000000000); \
             INSERT INTO {s}.endpoints (id, tenant, url, description, filter, status, secret, \
                                        body_format, created_at, updated_at) \
               VALUES ('{ENDPOINT}', 'acme', 'https://hooks.example.com/in', '', '{{*}}', \
                       'active', '\\x01', 'envelope', 1700000000000, 1700000000000); \
             INSERT INTO {s}.deliveries (id, message_id, tenant, topic, kind, target, status, \
                 attempts, next_attempt_at, last_outcome, last_status_code, last_excerpt, \
                 last_at, dead_reason, ledger_len, created_at, updated_at, completed_at) \
               VALUES ('{DELIVERY}', '{MESSAGE}', 'acme', 'order.created', 'webhook', \
                       '{ENDPOINT}', 'dead', 2, 1700000100000, 'response-5xx', 503, 'boom', \
                       1700000100000, 'max_attempts', 2, 1700000000000, 1700000100000, \
                       1700000100000); \
             INSERT INTO {s}.attempts VALUES \
               ('{DELIVERY}', 1, 'acme', false, 1700000000000, 1700000001000, 'response-5xx', \
                500, 'first'), \
               ('{DELIVERY}', 2, 'acme', false, 1700000099000, 1700000100000, 'response-5xx', \
                503, 'boom');",
            v1 = V1.replace("{schema}", &s),
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(setup.to_string()))
            .execute(&db.admin)
            .await
            .expect("a version-1 schema");

        let pool = db.pool(&db.app("upgrade"), 2).await;
        let store = db.store(pool, Arc::new(SystemClock));
        let applied = store.migrate().await.expect("upgrade");
        assert!(applied >= 1, "the new migrations ran");
        assert_eq!(store.migrate().await.expect("again"), 0, "and only once");

        let acme = TenantId::new("acme").unwrap();
        let id = DeliveryId::parse(DELIVERY).unwrap();
        let d = store.get_delivery(&acme, id).await.expect("the delivery");
        assert_eq!((d.status, d.attempts, d.run), (DeliveryStatus::Dead, 2, 1));
        assert_eq!(d.last_outcome.expect("kept").status_code, Some(503));
        let attempts = store.attempts(&acme, id).await.expect("the attempts");
        let seen: Vec<_> = attempts
            .iter()
            .map(|a| (a.number, a.run, a.scheduled_at, a.record.excerpt.clone()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (1, 1, None, Some("first".to_owned())),
                (2, 1, None, Some("boom".to_owned())),
            ]
        );
        assert_eq!(attempts[1].payload, PayloadFingerprint::of(br#"{"n":1}"#));
        let e = store
            .get_endpoint(&acme, EndpointId::parse(ENDPOINT).unwrap())
            .await
            .expect("the endpoint");
        assert_eq!(e.last_delivery, None);

        store.replay(&acme, id).await.expect("replay");
        assert_eq!(store.get_delivery(&acme, id).await.unwrap().run, 2);
        assert_eq!(store.attempts(&acme, id).await.unwrap().len(), 2);
    })
    .await;
}
