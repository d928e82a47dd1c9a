//! Operator calls (replay, retry now) and tenant isolation of the ledger (endpoints,
//! consumers and their tenant isolation are in `endpoints.rs`).

use outboxkit_core::{
    DeliveryFilter, DeliveryId, DeliveryStatus, ErrorKind, HandlerOutcome, OsEntropy, Outcome,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Only a `dead` delivery can be replayed: it comes back `pending`, due now, with a fresh
/// budget; anything else is a `Conflict`, an unknown id `NotFound`.
pub async fn replay_only_dead(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("a.one")).await;
    enqueue(&fx, msg("a.two").delay(secs(600))).await;
    let t = Default::default();
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_kind(
        fx.store().replay(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "replay processing",
    );
    let policy = handler_policy(8);
    let snooze = Outcome::Handler(HandlerOutcome::Snooze(secs(5)));
    settle(&fx, &got, snooze, &policy).await;
    fx.clock().advance(secs(5));
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!((got.lease.attempts, got.lease.snoozes), (1, 1));
    settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Discard),
        &policy,
    )
    .await;
    let pending = list_all(
        &fx,
        &t,
        &DeliveryFilter {
            status: Some(DeliveryStatus::Pending),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(pending.len(), 1);
    assert_kind(
        fx.store().replay(&t, pending[0].id).await,
        ErrorKind::Conflict,
        "replay pending",
    );
    fx.clock().advance(secs(30));
    fx.store()
        .replay(&t, got.delivery.id)
        .await
        .expect("replay dead");
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.snoozes),
        (DeliveryStatus::Pending, 0, 0)
    );
    assert_eq!(d.next_attempt_at, now(&fx));
    assert_eq!(
        (d.dead_reason, d.completed_at, d.lease_until),
        (None, None, None)
    );
    let again = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(again.delivery.id, got.delivery.id);
    assert_eq!(again.lease.attempts, 1);
    settle(&fx, &again, Outcome::Handler(HandlerOutcome::Ok), &policy).await;
    assert_kind(
        fx.store().replay(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "replay succeeded",
    );
    let unknown = DeliveryId::generate(now(&fx), &OsEntropy);
    assert_kind(
        fx.store().replay(&t, unknown).await,
        ErrorKind::NotFound,
        "replay unknown",
    );
}

/// Another tenant's delivery is `NotFound` for replay, retry now, reads and its ledger,
/// and nothing changes.
pub async fn replay_across_tenants_is_not_found(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let e = enqueue(&fx, msg("order.created").tenant("alpha")).await;
    let got = claim_one(&fx, &for_consumer(&c)).await;
    settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Discard),
        &handler_policy(8),
    )
    .await;
    let (alpha, beta) = (tenant("alpha"), tenant("beta"));
    let id = got.delivery.id;
    let before = delivery(&fx, &alpha, id).await;
    assert_kind(
        fx.store().replay(&beta, id).await,
        ErrorKind::NotFound,
        "replay as another tenant",
    );
    assert_kind(
        fx.store().retry_now(&beta, id).await,
        ErrorKind::NotFound,
        "retry_now as another tenant",
    );
    assert_kind(
        fx.store().get_delivery(&beta, id).await,
        ErrorKind::NotFound,
        "get_delivery as another tenant",
    );
    assert_kind(
        fx.store().attempts(&beta, id).await,
        ErrorKind::NotFound,
        "attempts as another tenant",
    );
    assert_kind(
        fx.store().get_message(&beta, e.message_id).await,
        ErrorKind::NotFound,
        "get_message as another tenant",
    );
    assert_eq!(delivery(&fx, &alpha, id).await, before);
    fx.store()
        .replay(&alpha, id)
        .await
        .expect("replay as the owner");
    assert_eq!(
        delivery(&fx, &alpha, id).await.status,
        DeliveryStatus::Pending
    );
}

/// `retry_now` makes a `pending` or `held` delivery `pending` and due now, keeping its
/// attempts; any other status is a `Conflict`.
pub async fn retry_now_makes_due(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created").delay(secs(3600))).await;
    let t = Default::default();
    claim_none(&fx, &for_consumer(&c)).await;
    let waiting = list_all(
        &fx,
        &t,
        &DeliveryFilter {
            consumer: Some(c.clone()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(waiting.len(), 1);
    fx.clock().advance(secs(5));
    fx.store()
        .retry_now(&t, waiting[0].id)
        .await
        .expect("retry_now pending");
    let d = delivery(&fx, &t, waiting[0].id).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Pending, 0, now(&fx))
    );
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_kind(
        fx.store().retry_now(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "retry_now processing",
    );
    settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Ok),
        &handler_policy(8),
    )
    .await;
    assert_kind(
        fx.store().retry_now(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "retry_now succeeded",
    );

    fx.clock().advance(secs(3600));
    let hook = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &hook, http(401), &webhook_policy()).await;
    fx.store()
        .retry_now(&t, hook.delivery.id)
        .await
        .expect("retry_now held");
    let d = delivery(&fx, &t, hook.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Pending, 1, now(&fx))
    );
    let again = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(
        (again.lease.attempts, again.lease.claimed_from),
        (2, DeliveryStatus::Pending)
    );
    settle(&fx, &again, http(410), &webhook_policy()).await;
    assert_kind(
        fx.store().retry_now(&t, hook.delivery.id).await,
        ErrorKind::Conflict,
        "retry_now dead",
    );
    let unknown = DeliveryId::generate(now(&fx), &OsEntropy);
    assert_kind(
        fx.store().retry_now(&t, unknown).await,
        ErrorKind::NotFound,
        "retry_now unknown",
    );
}

/// Ledger reads are scoped by tenant.
pub async fn tenant_isolation_of_ledger(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let mut by_tenant = Vec::new();
    for name in ["alpha", "beta"] {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(
                enqueue(&fx, msg("order.created").tenant(name))
                    .await
                    .message_id,
            );
        }
        by_tenant.push((tenant(name), ids));
    }
    let got = claim(&fx, &for_consumer(&c)).await;
    for g in &got {
        settle(
            &fx,
            g,
            Outcome::Handler(HandlerOutcome::Retry),
            &handler_policy(8),
        )
        .await;
    }
    for (i, (t, ids)) in by_tenant.iter().enumerate() {
        let (other, other_ids) = &by_tenant[1 - i];
        let mine = list_all(&fx, t, &DeliveryFilter::default()).await;
        assert_eq!(mine.len(), 3);
        assert!(mine
            .iter()
            .all(|d| &d.tenant == t && ids.contains(&d.message_id)));
        for d in &mine {
            assert_kind(
                fx.store().get_delivery(other, d.id).await,
                ErrorKind::NotFound,
                "get_delivery",
            );
            assert_kind(
                fx.store().attempts(other, d.id).await,
                ErrorKind::NotFound,
                "attempts",
            );
            assert_eq!(
                fx.store().attempts(t, d.id).await.expect("attempts").len(),
                1
            );
        }
        for m in other_ids {
            assert_kind(
                fx.store().get_message(t, *m).await,
                ErrorKind::NotFound,
                "get_message",
            );
        }
    }
    assert!(list_all(&fx, &tenant("gamma"), &DeliveryFilter::default())
        .await
        .is_empty());
}
