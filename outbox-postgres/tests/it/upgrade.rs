//! A schema made by version 1 (which parked a paused endpoint's deliveries as `pending`)
//! upgrades in place: nothing is lost, the paused endpoint's deliveries wait for it, and the
//! resume sends them in order.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::DeliveryStoreExt;
use outboxkit_core::{
    Clock, DeliveryFilter, DeliveryStatus, DeliveryStore, Endpoint, EndpointStatus, EndpointStore,
    EndpointUpdate, Ledger, MessageStore, NewMessage, OsEntropy, PageRequest, TenantId, Timestamp,
};
use outboxkit_postgres::{sqlx, PostgresConfig, PostgresStore};
use outboxkit_testing::ManualClock;

use crate::support::{success, with_db, LEASE};

fn endpoint(tenant: &TenantId, now: Timestamp) -> Endpoint {
    outboxkit_testing::sample_endpoint(tenant, now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_with_a_paused_endpoint_upgrades_in_place() {
    with_db(|db| async move {
        let s = format!("\"{}\"", db.schema);
        // The schema exactly as version 1 left it.
        for statement in [
            format!("CREATE SCHEMA {s}"),
            format!(
                "CREATE TABLE {s}.schema_migrations (version integer PRIMARY KEY, \
                 name text NOT NULL, applied_at bigint NOT NULL)"
            ),
            include_str!("../../src/schema/0001_init.sql").replace("{schema}", &s),
            format!("INSERT INTO {s}.schema_migrations VALUES (1, 'init', 0)"),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_string()))
                .execute(&db.admin)
                .await
                .unwrap();
        }
        let clock = ManualClock::new();
        let store = db.store(db.pool(&db.app("upgrade"), 2).await, clock.clone());
        // The rows are written by the current store in a scratch schema, then copied into
        // version 1's tables (the columns version 1 had).
        let scratch = format!("{}_src", db.schema);
        let writer = PostgresStore::new(
            db.pool(&db.app("upgrade-src"), 2).await,
            PostgresConfig::new(scratch.clone()),
            clock.clone(),
            Arc::new(OsEntropy),
        )
        .unwrap();
        writer.migrate().await.unwrap();
        let acme = TenantId::new("acme").unwrap();
        let paused = endpoint(&acme, clock.now());
        clock.advance(Duration::from_millis(1));
        let active = endpoint(&acme, clock.now());
        writer.create_endpoint(&paused).await.unwrap();
        writer.create_endpoint(&active).await.unwrap();
        let mut ids = Vec::new();
        for n in 0..3 {
            let m = NewMessage::new("order.created", serde_json::json!({ "n": n })).tenant("acme");
            ids.push(writer.enqueue(m).await.unwrap().message_id);
            clock.advance(Duration::from_millis(1));
        }
        drop(writer);
        crate::legacy::copy_rows(&db.admin, &scratch, &db.schema).await;
        // Version 1 paused by changing the status only: its deliveries stayed `pending`.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {s}.endpoints SET status = 'paused' WHERE id = $1"
        )))
        .bind(paused.id.as_uuid())
        .execute(&db.admin)
        .await
        .unwrap();

        // Every migration after version 1 applies (2, hold; and those after it).
        let after_v1 = u32::try_from(outboxkit_postgres::migrations().len() - 1).unwrap();
        assert_eq!(
            store.migrate().await.unwrap(),
            after_v1,
            "versions 2.. apply"
        );
        let all = store
            .list_deliveries(&acme, &DeliveryFilter::default(), PageRequest::first(100))
            .await
            .unwrap()
            .items;
        assert_eq!(all.len(), 6, "nothing is lost");
        for d in &all {
            if d.destination.endpoint() == Some(paused.id) {
                assert_eq!(
                    (d.status, d.next_attempt_at),
                    (DeliveryStatus::Held, Timestamp::MAX)
                );
            } else {
                assert_eq!(d.status, DeliveryStatus::Pending);
            }
        }
        let request = outboxkit_core::ClaimRequest::new(100, LEASE).webhooks(6);
        let first = store.claim(&request).await.unwrap();
        assert_eq!(first.len(), 3);
        for c in &first {
            assert_eq!(c.delivery.destination.endpoint(), Some(active.id));
            store
                .complete(&c.lease, &success(clock.now()))
                .await
                .unwrap();
        }
        clock.advance(Duration::from_secs(3600));
        assert!(store.claim(&request).await.unwrap().is_empty());

        let resume = EndpointUpdate {
            status: Some(EndpointStatus::Active),
            ..Default::default()
        };
        store
            .update_endpoint(&acme, paused.id, &resume)
            .await
            .unwrap();
        let later = store.claim(&request).await.unwrap();
        assert_eq!(
            later.iter().map(|c| c.message.id).collect::<Vec<_>>(),
            ids,
            "the resume sends them in enqueue order"
        );
        for c in &later {
            assert_eq!(c.delivery.destination.endpoint(), Some(paused.id));
            assert_eq!(c.lease.attempts, 1);
        }
    })
    .await;
}
