//! A file made by schema version 1 (which parked a paused endpoint's deliveries as
//! `pending`) upgrades in place: nothing is lost, the paused endpoint's deliveries wait for
//! it, and the resume sends them in order.

use std::time::Duration;

use outboxkit_core::DeliveryStoreExt;
use outboxkit_core::{
    ClaimRequest, Clock, Completion, DeliveryFilter, DeliveryStatus, DeliveryStore, Endpoint,
    EndpointStatus, EndpointStore, EndpointUpdate, Ledger, MessageStore, NewMessage, PageRequest,
    TenantId, Timestamp, Verdict,
};
use outboxkit_sqlite::SCHEMA_VERSION;
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::{open, LEASE};

fn endpoint(tenant: &TenantId, now: Timestamp) -> Endpoint {
    outboxkit_testing::sample_endpoint(tenant, now)
}

#[tokio::test]
async fn a_version_1_file_with_a_paused_endpoint_upgrades_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new();
    let acme = TenantId::new("acme").unwrap();
    let paused = endpoint(&acme, clock.now());
    clock.advance(Duration::from_millis(1));
    let active = endpoint(&acme, clock.now());
    let mut ids = Vec::new();
    {
        let store = open(&path, clock.clone()).await;
        store.create_endpoint(&paused).await.unwrap();
        store.create_endpoint(&active).await.unwrap();
        for n in 0..3 {
            let m = NewMessage::new("order.created", serde_json::json!({ "n": n })).tenant("acme");
            ids.push(store.enqueue(m).await.unwrap().message_id);
            clock.advance(Duration::from_millis(1));
        }
    }
    // Make it the file version 1 left: version 2 changes no table, only rows, so removing
    // its record and pausing the way version 1 did (the status only; the deliveries stay
    // `pending`) gives exactly a version 1 file with a paused endpoint's queue.
    {
        let conn = Connection::open(&path).unwrap();
        // Only version 2's record: the later ledger migration (3) adds columns and stays
        // applied (the runner applies every shipped migration not yet recorded).
        conn.execute("DELETE FROM outbox_schema_version WHERE version = 2", [])
            .unwrap();
        conn.execute(
            "UPDATE outbox_endpoints SET status = 'paused' WHERE id = ?1",
            [paused.id.to_string()],
        )
        .unwrap();
    }
    const { assert!(SCHEMA_VERSION >= 2, "version 2 (hold) is shipped") };
    let store = open(&path, clock.clone()).await;
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("SELECT max(version) FROM outbox_schema_version", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION, "versions 2.. applied on open");
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
    let request = ClaimRequest::new(100, LEASE).webhooks(6);
    let first = store.claim(&request).await.unwrap();
    assert_eq!(first.len(), 3);
    let done = Completion {
        verdict: Verdict::Succeeded,
        attempt: None,
    };
    for c in &first {
        assert_eq!(c.delivery.destination.endpoint(), Some(active.id));
        store.complete(&c.lease, &done).await.unwrap();
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
}
