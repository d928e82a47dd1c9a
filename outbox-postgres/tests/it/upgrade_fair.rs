//! A database made by the previous schema version (3, the last one shipped before fair
//! claiming), with deliveries in every status, their attempts and endpoints, upgrades in
//! place while several processes call `migrate()` at once: exactly one applies the new
//! version, no row changes, and every delivery is still claimable or finished as before.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Clock, DeliveryStore, EndpointStatus, EndpointStore, EndpointUpdate,
};
use outboxkit_core::{DeliveryStoreExt, OperatorStore};
use outboxkit_postgres::{migrations, sqlx};
use outboxkit_testing::ManualClock;

use crate::legacy::{every_status_at, migrate_concurrently, snapshot};
use crate::support::{success, with_db, worker, LEASE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_with_every_status_upgrades_in_place_under_concurrent_migrates() {
    with_db(|db| async move {
        let s = format!("\"{}\"", db.schema);
        // Version 3 exactly as its migrate() left it, with rows in every status as the
        // store's statements write them (see `legacy`).
        let clock = ManualClock::new();
        let legacy = every_status_at(&db, 3, &clock).await;
        let (acme, hook) = (legacy.tenant, legacy.hook);
        let before = snapshot(&db.admin, &s).await;

        // Four processes migrate at once: one applies version 4, the others find it done.
        let stores = migrate_concurrently(&db, &clock, 3).await;
        assert_eq!(snapshot(&db.admin, &s).await, before, "no row changed");
        let versions: Vec<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT version FROM {s}.schema_migrations ORDER BY version"
        )))
        .fetch_all(&db.admin)
        .await
        .unwrap();
        // Every shipped migration (the numbers may have gaps).
        assert_eq!(
            versions,
            migrations().iter().map(|m| m.version).collect::<Vec<_>>()
        );

        // Claimable as before: nothing is due yet (the pending ones wait behind their key's
        // leased head, or for the retry), the finished ones stay finished.
        let store = Arc::new(stores.into_iter().next().unwrap());
        let both = ClaimRequest::new(100, LEASE)
            .handler(worker(), 5)
            .webhooks(5);
        assert!(store.claim(&both).await.unwrap().is_empty());
        // After the leases end, the leased rows are claimed again (a second attempt) and the
        // rest follow in key order; the paused endpoint's deliveries stay held.
        clock.advance(LEASE + Duration::from_secs(1));
        let again = store.claim(&both).await.unwrap();
        let mut attempts: Vec<u32> = again.iter().map(|c| c.lease.attempts).collect();
        attempts.sort_unstable();
        assert_eq!(
            attempts,
            vec![2, 2, 2],
            "the three leased rows, on their second attempt"
        );
        for c in &again {
            store
                .complete(&c.lease, &success(clock.now()))
                .await
                .unwrap();
        }
        let rest = store.claim(&both).await.unwrap();
        assert_eq!(rest.len(), 1, "the last keyed handler delivery");
        store
            .complete(&rest[0].lease, &success(clock.now()))
            .await
            .unwrap();
        store
            .update_endpoint(
                &acme,
                hook,
                &EndpointUpdate {
                    status: Some(EndpointStatus::Active),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        clock.advance(Duration::from_secs(60));
        let webhooks = store.claim(&both).await.unwrap();
        assert_eq!(
            webhooks.len(),
            3,
            "the resumed endpoint's heads: one per ordering key and the unkeyed one"
        );
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (stats.succeeded, stats.dead, stats.processing, stats.pending),
            (6, 1, 3, 4),
            "{stats:?}"
        );
    })
    .await;
}
