//! A database made by schema version 14 (no attempt detail) upgrades in place while several
//! processes migrate at once: every attempt it holds (in `attempts`, and final attempts
//! folded into history rows) reads no detail, new attempts keep theirs on both paths, a
//! replay moves a folded attempt back with its detail, and history partitions made after the
//! upgrade have the column.

use std::time::Duration;

use outboxkit_core::{
    Claimed, Clock, Completion, DeadReason, DeliveryId, DeliveryStatus, DeliveryStore,
    DeliveryStoreExt, Ledger, MessageStore, OperatorStore, TenantId, Verdict,
};
use outboxkit_postgres::sqlx;
use outboxkit_testing::ManualClock;

use crate::legacy::migrate_concurrently;
use crate::support::{claim_request, count, detailed, order, sample_detail, success, with_db};

fn retry(clock: &ManualClock) -> Verdict {
    Verdict::Retry {
        at: clock.now().saturating_add(Duration::from_secs(1)),
    }
}

fn dead() -> Verdict {
    Verdict::Dead {
        reason: DeadReason::Permanent,
    }
}

/// `completion` with another verdict.
fn with(verdict: Verdict, completion: Completion) -> Completion {
    Completion {
        verdict,
        ..completion
    }
}

async fn details(
    store: &impl Ledger,
    id: DeliveryId,
) -> Vec<Option<outboxkit_core::AttemptDetail>> {
    store
        .attempts(&TenantId::default(), id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.record.detail.map(|d| *d))
        .collect()
}

fn find(claims: &[Claimed], id: DeliveryId) -> &Claimed {
    claims
        .iter()
        .find(|c| c.delivery.id == id)
        .expect("the delivery is claimed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_14_database_upgrades_with_its_attempts_without_detail() {
    with_db(|db| async move {
        let s = format!("\"{}\"", db.schema);
        let clock = ManualClock::new();
        // Oldest first: retrying (an attempt in `attempts`), succeeded (its attempt folded
        // into the history row), dead (folded), pending (untouched).
        let ids: Vec<DeliveryId> = {
            let pool = db.pool(&db.app("v14"), 2).await;
            let store = db.ready_store(pool, clock.clone()).await;
            for n in 0..3 {
                store.enqueue(order(n)).await.unwrap();
                clock.advance(Duration::from_millis(1));
            }
            let got = store.claim(&claim_request(3)).await.unwrap();
            assert_eq!(got.len(), 3);
            let now = clock.now();
            store
                .complete(&got[0].lease, &with(retry(&clock), success(now)))
                .await
                .unwrap();
            store.complete(&got[1].lease, &success(now)).await.unwrap();
            store
                .complete(&got[2].lease, &with(dead(), success(now)))
                .await
                .unwrap();
            store.enqueue(order(3)).await.unwrap();
            got.iter().map(|c| c.delivery.id).collect()
        };
        // Make it the database version 14 left: no detail columns, no record of version 15
        // or later (later migrations create only what is missing, so they apply again).
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {s}.attempts DROP COLUMN detail; \
             ALTER TABLE {s}.history DROP COLUMN a_detail; \
             DELETE FROM {s}.schema_migrations WHERE version >= 15"
        )))
        .execute(&db.admin)
        .await
        .unwrap();
        let store = migrate_concurrently(&db, &clock, 14)
            .await
            .into_iter()
            .next()
            .unwrap();
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM {s}.history WHERE a_detail IS NOT NULL"
            )
            .await
                + count(
                    &db,
                    "SELECT count(*) FROM {s}.attempts WHERE detail IS NOT NULL"
                )
                .await,
            0
        );
        for id in &ids {
            assert_eq!(
                details(&store, *id).await,
                vec![None],
                "an attempt from before"
            );
        }
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (stats.pending, stats.succeeded, stats.dead),
            (2, 1, 1),
            "every delivery kept its status"
        );

        // Ten days on (history partitions made after the upgrade): the retrying delivery
        // fails again (into `attempts`) and then succeeds (folded), with details.
        clock.advance(Duration::from_secs(10 * 86_400));
        let got = store.claim(&claim_request(5)).await.unwrap();
        assert_eq!(got.len(), 2, "the retrying and the untouched delivery");
        let retried = find(&got, ids[0]);
        store
            .complete(&retried.lease, &with(retry(&clock), detailed(clock.now())))
            .await
            .unwrap();
        let untouched = got.iter().find(|c| c.delivery.id != ids[0]).unwrap();
        store
            .complete(&untouched.lease, &detailed(clock.now()))
            .await
            .unwrap();
        clock.advance(Duration::from_secs(2));
        let again = store.claim(&claim_request(5)).await.unwrap();
        store
            .complete(&find(&again, ids[0]).lease, &detailed(clock.now()))
            .await
            .unwrap();
        let d = Some(sample_detail());
        assert_eq!(
            details(&store, ids[0]).await,
            vec![None, d.clone(), d.clone()]
        );
        assert_eq!(
            details(&store, untouched.delivery.id).await,
            vec![d.clone()]
        );

        // The dead one replays: its folded attempt (no detail) moves to `attempts`, the new
        // run's final attempt keeps its detail.
        store.replay(&TenantId::default(), ids[2]).await.unwrap();
        let replayed = store.claim(&claim_request(5)).await.unwrap();
        store
            .complete(&find(&replayed, ids[2]).lease, &detailed(clock.now()))
            .await
            .unwrap();
        assert_eq!(details(&store, ids[2]).await, vec![None, d.clone()]);
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (stats.succeeded, stats.total()),
            (4, 4),
            "{stats:?} ({:?})",
            DeliveryStatus::Succeeded
        );
    })
    .await;
}
