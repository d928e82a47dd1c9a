//! A database made by schema version 5 (the last one whose `deliveries` table held finished
//! rows) or 6 (finished rows in `deliveries_done`), with deliveries in every status, their
//! attempts and endpoints, upgrades to the narrow queue and partitioned history of version 7
//! in place while several processes call `migrate()` at once: exactly one applies it, every
//! row keeps every field (read through the view `delivery_rows`), a live lease's token still
//! completes its delivery, finished deliveries stay finished, and every unfinished one is
//! still claimable.

use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Clock, DeliveryFilter, DeliveryStatus, DeliveryStore, EndpointStatus,
    EndpointStore, EndpointUpdate, Ledger, PageRequest,
};
use outboxkit_core::{DeliveryStoreExt, OperatorStore};
use outboxkit_postgres::sqlx;
use outboxkit_testing::ManualClock;

use crate::legacy::{every_status_at, migrate_concurrently, snapshot};
use crate::support::{count, detailed, sample_detail, with_db, worker, LEASE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_5_database_moves_finished_rows_to_the_history_under_concurrent_migrates() {
    every_status_upgrades_from(5).await;
}

/// Version 6 (finished rows in `deliveries_done`) to the narrow queue of version 7: the same
/// checks, and the 11 unfinished deliveries in 2 groups (the handler and the endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_6_database_moves_to_the_narrow_queue_under_concurrent_migrates() {
    every_status_upgrades_from(6).await;
}

async fn every_status_upgrades_from(from: i32) {
    with_db(|db| async move {
        let s = format!("\"{}\"", db.schema);
        let clock = ManualClock::new();
        let legacy = every_status_at(&db, from, &clock).await;
        let before = snapshot(&db.admin, &s).await;

        let stores = migrate_concurrently(&db, &clock, from).await;
        assert_eq!(
            snapshot(&db.admin, &s).await,
            before,
            "every message, delivery, attempt, endpoint and consumer kept every field"
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM {s}.endpoints WHERE headers <> '[]'"
            )
            .await,
            0,
            "an endpoint from before version 12 has no custom headers"
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM {s}.history").await,
            3,
            "the 2 succeeded and the dead delivery are in the history"
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM {s}.queue WHERE state IN (0, 1, 2, 3)"
            )
            .await,
            11,
            "the hot table holds the 11 unfinished deliveries"
        );
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.queue").await, 11);
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.groups").await, 2);

        let store = stores.into_iter().next().unwrap();
        let acme = legacy.tenant.clone();
        // Finished deliveries stay finished, with their attempts.
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (
                stats.succeeded,
                stats.dead,
                stats.sending,
                stats.processing,
                stats.held,
                stats.pending
            ),
            (2, 1, 1, 2, 7, 1),
            "{stats:?}"
        );
        let finished: Vec<(uuid::Uuid, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT id, CASE status WHEN 4 THEN 'succeeded' ELSE 'dead' END FROM {s}.history \
              ORDER BY seq"
        )))
        .fetch_all(&db.admin)
        .await
        .unwrap();
        for (id, status) in &finished {
            let id = outboxkit_core::DeliveryId::from_uuid(*id).unwrap();
            let d = store.get_delivery(&acme, id).await.unwrap();
            assert_eq!(d.status.as_str(), status);
            let attempts = store.attempts(&acme, id).await.unwrap();
            let expected = if status == "succeeded" { 1 } else { 0 };
            assert_eq!(attempts.len(), expected, "{status}: {attempts:?}");
        }

        // The live leases' tokens still complete their deliveries, before their leases end.
        let both = ClaimRequest::new(100, LEASE)
            .handler(worker(), 5)
            .webhooks(5);
        assert!(
            store.claim(&both).await.unwrap().is_empty(),
            "nothing is due while the leases live"
        );
        for lease in legacy.processing.iter().chain([&legacy.sending]) {
            store
                .complete(lease, &detailed(clock.now()))
                .await
                .expect("a live lease completes after the upgrade");
            let d = store.get_delivery(&acme, lease.delivery_id).await.unwrap();
            assert_eq!(d.status, DeliveryStatus::Succeeded);
            assert_eq!(
                store
                    .attempts(&acme, lease.delivery_id)
                    .await
                    .unwrap()
                    .len(),
                1
            );
        }

        // The dead one replays out of the history into the queue.
        let (dead, _) = finished.iter().find(|(_, st)| st == "dead").unwrap();
        let dead = outboxkit_core::DeliveryId::from_uuid(*dead).unwrap();
        store.replay(&acme, dead).await.unwrap();
        assert_eq!(
            store.get_delivery(&acme, dead).await.unwrap().status,
            DeliveryStatus::Pending
        );

        // Every unfinished delivery is still claimable: resume the endpoint and drain.
        store
            .update_endpoint(
                &acme,
                legacy.hook,
                &EndpointUpdate {
                    status: Some(EndpointStatus::Active),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        clock.advance(Duration::from_secs(61));
        let mut drained = 0;
        for _ in 0..20 {
            let batch = store.claim(&both).await.unwrap();
            if batch.is_empty() {
                break;
            }
            for c in &batch {
                store
                    .complete(&c.lease, &detailed(clock.now()))
                    .await
                    .unwrap();
            }
            drained += batch.len();
        }
        assert_eq!(
            drained, 9,
            "the pending handler delivery, the 7 held webhook ones and the replayed one"
        );
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (stats.succeeded, stats.dead, stats.total()),
            (14, 0, 14),
            "{stats:?}"
        );
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.queue").await, 0);
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.history").await, 14);

        // The attempts from before the upgrade read no detail; every one since keeps its own.
        let all = store
            .list_deliveries(&acme, &DeliveryFilter::default(), PageRequest::first(100))
            .await
            .unwrap()
            .items;
        let (mut old, mut new) = (0, 0);
        for d in &all {
            for a in store.attempts(&acme, d.id).await.unwrap() {
                match a.record.detail.as_deref() {
                    None => old += 1,
                    Some(got) => {
                        assert_eq!(got, &sample_detail());
                        new += 1;
                    }
                }
            }
        }
        assert_eq!(
            (old, new),
            (3, 12),
            "the 3 attempts from before, the 12 completions since"
        );
    })
    .await;
}
