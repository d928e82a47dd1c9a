//! A database made by the previous schema version (3, the last one shipped before fair
//! claiming), with deliveries in every status, their attempts and endpoints, upgrades in
//! place while several processes call `migrate()` at once: exactly one applies the new
//! version, no row changes, and every delivery is still claimable or finished as before.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    AttemptOutcome, AttemptRecord, ClaimRequest, Clock, Completion, DeliveryStore, Endpoint,
    EndpointId, EndpointStatus, EndpointStore, EndpointUpdate, EndpointUrl, MessageStore,
    NewMessage, OsEntropy, SealedSecret, TenantId, TopicFilter, Verdict,
};
use outboxkit_postgres::{migrations, sqlx};
use outboxkit_testing::ManualClock;

use crate::support::{success, with_db, worker, LEASE};

/// Every row of the outbox's tables, as JSON text in a stable order.
async fn snapshot(admin: &sqlx::PgPool, s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (table, key) in [
        ("messages", "id"),
        ("deliveries", "id"),
        ("attempts", "delivery_id, number"),
        ("endpoints", "id"),
        ("consumers", "name"),
    ] {
        let rows: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT row_to_json(t)::text FROM {s}.{table} t ORDER BY {key}"
        ))
        .fetch_all(admin)
        .await
        .unwrap();
        out.push(format!("{table}: {}", rows.len()));
        out.extend(rows);
    }
    out
}

fn dead() -> Completion {
    Completion {
        verdict: Verdict::Dead {
            reason: outboxkit_core::DeadReason::Permanent,
        },
        attempt: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_with_every_status_upgrades_in_place_under_concurrent_migrates() {
    with_db(|db| async move {
        let s = format!("\"{}\"", db.schema);
        // Version 3 exactly as its migrate() left it.
        sqlx::raw_sql(&format!(
            "CREATE SCHEMA {s}; CREATE TABLE {s}.schema_migrations (version integer \
             PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)"
        ))
        .execute(&db.admin)
        .await
        .unwrap();
        for m in migrations().iter().filter(|m| m.version <= 3) {
            sqlx::raw_sql(&m.sql(&db.schema).unwrap())
                .execute(&db.admin)
                .await
                .unwrap();
            sqlx::query(&format!(
                "INSERT INTO {s}.schema_migrations VALUES ($1, $2, 0)"
            ))
            .bind(m.version)
            .bind(m.name)
            .execute(&db.admin)
            .await
            .unwrap();
        }

        // Rows in every status, written by the store's statements (which version 3's tables
        // serve as they are: version 4 changes an index only).
        let clock = ManualClock::new();
        let store = db.store(db.pool(&db.app("v3"), 2).await, clock.clone());
        let acme = TenantId::new("acme").unwrap();
        outboxkit_core::EndpointStore::put_consumer(
            &store,
            &outboxkit_core::Consumer {
                name: worker(),
                filter: TopicFilter::all(),
                created_at: clock.now(),
            },
        )
        .await
        .unwrap();
        let hook = Endpoint {
            id: EndpointId::generate(clock.now(), &OsEntropy),
            tenant: acme.clone(),
            url: EndpointUrl::parse("https://hooks.example.com/in").unwrap(),
            description: String::new(),
            filter: TopicFilter::all(),
            status: EndpointStatus::Active,
            secret: SealedSecret(vec![1; 8]),
            previous_secret: None,
            body_format: Default::default(),
            rate_limit: None,
            last_delivery: None,
            created_at: clock.now(),
            updated_at: clock.now(),
        };
        store.create_endpoint(&hook).await.unwrap();
        for n in 0..6 {
            let m = NewMessage::new("order.created", serde_json::json!({ "n": n }))
                .tenant("acme")
                .ordering_key(format!("k{}", n % 2));
            store.enqueue(m).await.unwrap();
            clock.advance(Duration::from_millis(1));
        }
        // 6 handler and 6 webhook deliveries, keys k0 (n = 0, 2, 4) and k1 (1, 3, 5), and one
        // unkeyed message. Handler: 2 succeeded, 1 dead, 1 sending, 2 processing (leased),
        // 1 pending behind its key's leased head.
        let handler = ClaimRequest::new(5, LEASE).handler(worker(), 5);
        let claimed = store.claim(&handler).await.unwrap();
        assert_eq!(claimed.len(), 2, "one per ordering key is claimable");
        for c in &claimed {
            store
                .complete(&c.lease, &success(clock.now()))
                .await
                .unwrap();
        }
        let claimed = store.claim(&handler).await.unwrap();
        store.complete(&claimed[0].lease, &dead()).await.unwrap();
        store.mark_sending(&claimed[1].lease).await.unwrap();
        let unkeyed = store
            .enqueue(NewMessage::new("order.created", serde_json::json!({})).tenant("acme"))
            .await
            .unwrap();
        assert_eq!(unkeyed.deliveries, 2);
        // Webhook: one failed attempt back to pending with a due time, then the endpoint is
        // paused (its waiting deliveries are held).
        let hooks = ClaimRequest::new(1, LEASE).webhooks(5);
        let failed = store.claim(&hooks).await.unwrap();
        let now = clock.now();
        store
            .complete(
                &failed[0].lease,
                &Completion {
                    verdict: Verdict::Retry {
                        at: now.saturating_add(Duration::from_secs(60)),
                    },
                    attempt: Some(AttemptRecord {
                        started_at: now,
                        finished_at: now,
                        outcome: AttemptOutcome::Failed(outboxkit_core::ErrorClass::Timeout),
                        status_code: Some(503),
                        excerpt: Some("busy".into()),
                    }),
                },
            )
            .await
            .unwrap();
        store
            .update_endpoint(
                &acme,
                hook.id,
                &EndpointUpdate {
                    status: Some(EndpointStatus::Paused),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let handler_claim = store.claim(&handler).await.unwrap();
        assert_eq!(
            handler_claim.len(),
            2,
            "k0's third (its head is dead) and the unkeyed one"
        );
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
            "every status is present before the upgrade: {stats:?}"
        );
        let before = snapshot(&db.admin, &s).await;

        // Four processes migrate at once: one applies version 4, the others find it done.
        let stores: Vec<_> = futures::future::join_all((0..4).map(|i| {
            let db = db.clone();
            let clock = clock.clone();
            async move {
                let pool = db.pool(&db.app(&format!("m{i}")), 1).await;
                db.store(pool, clock)
            }
        }))
        .await;
        let applied: Vec<u32> = futures::future::join_all(stores.iter().map(|st| st.migrate()))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let newer = migrations().iter().filter(|m| m.version > 3).count() as u32;
        assert_eq!(
            applied.iter().filter(|n| **n > 0).count(),
            1,
            "exactly one call applies: {applied:?}"
        );
        assert_eq!(
            applied.iter().sum::<u32>(),
            newer,
            "it applies every migration after version 3: {applied:?}"
        );
        assert_eq!(snapshot(&db.admin, &s).await, before, "no row changed");
        let versions: Vec<i32> = sqlx::query_scalar(&format!(
            "SELECT version FROM {s}.schema_migrations ORDER BY version"
        ))
        .fetch_all(&db.admin)
        .await
        .unwrap();
        assert_eq!(
            versions,
            (1..=migrations().len() as i32).collect::<Vec<_>>()
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
                hook.id,
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
