//! Fencing beyond the token: a lease is bound to its tenant too.

use outboxkit_core::{
    Completion, DeliveryStatus, ErrorKind, HandlerOutcome, Lease, Outcome, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// A lease with the right token but another tenant (a forged or mixed-up lease) is fenced
/// like a stale one: `complete`, `complete_many`, `release`, `extend` and `mark_sending`
/// fail with `LeaseLost` and change nothing; the true lease still works.
pub async fn forged_tenant_lease_is_fenced(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let acme = tenant("acme");
    let got = claim_one(&fx, &for_consumer(&c)).await;
    let before = delivery(&fx, &acme, got.delivery.id).await;
    let forged = Lease {
        tenant: tenant("other"),
        ..got.lease.clone()
    };
    let done = Completion {
        verdict: Verdict::Succeeded,
        attempt: record(
            &Outcome::Handler(HandlerOutcome::Ok),
            now(&fx),
            now(&fx),
            None,
        ),
    };
    assert_kind(
        fx.store().complete(&forged, &done).await,
        ErrorKind::LeaseLost,
        "complete",
    );
    let many = fx
        .store()
        .complete_many(&[(forged.clone(), done.clone())])
        .await
        .expect("complete_many");
    assert_kind(
        many.into_iter().next().expect("one result"),
        ErrorKind::LeaseLost,
        "complete_many",
    );
    let r = fx
        .store()
        .release(std::slice::from_ref(&forged), secs(0))
        .await
        .expect("release");
    assert_eq!((r.released, r.lost), (0, 1));
    assert_kind(
        fx.store().extend(&forged, secs(600)).await,
        ErrorKind::LeaseLost,
        "extend",
    );
    assert_kind(
        fx.store().mark_sending(&forged).await,
        ErrorKind::LeaseLost,
        "mark_sending",
    );
    assert_eq!(
        delivery(&fx, &acme, got.delivery.id).await,
        before,
        "a lease of another tenant changed the row"
    );
    assert!(fx
        .store()
        .attempts(&acme, got.delivery.id)
        .await
        .expect("attempts")
        .is_empty());
    fx.store()
        .complete(&got.lease, &done)
        .await
        .expect("the true lease completes");
    assert_eq!(
        delivery(&fx, &acme, got.delivery.id).await.status,
        DeliveryStatus::Succeeded
    );
}
