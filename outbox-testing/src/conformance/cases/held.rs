//! Held deliveries (401/403): free probes, release on a 2xx or by an operator.

use outboxkit_core::{DeliveryStatus, ErrorClass, Outcome, Verdict};

use super::helpers::*;
use crate::conformance::Fixture;

/// A 401 holds the delivery; the attempt that met it counts, the probe an hour later is
/// free, and a probe that meets 401 again keeps it held.
pub async fn verdict_held_then_probe_is_free(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let policy = webhook_policy();
    let got = claim_one(&fx, &for_webhooks()).await;
    let v = settle(&fx, &got, http(401), &policy).await;
    let probe_at = now(&fx).saturating_add(secs(3600));
    assert_eq!(v, Verdict::Held { probe_at });
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Held, 1, probe_at)
    );
    fx.clock().advance(secs(3599));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(1));
    let probe = claim_one(&fx, &for_webhooks()).await;
    assert!(probe.lease.is_probe());
    assert_eq!(probe.lease.claimed_from, DeliveryStatus::Held);
    assert_eq!(probe.lease.attempts, 1, "a probe spends no attempt");
    assert_eq!(probe.delivery.attempts, 1);
    assert_eq!(probe.delivery.status, DeliveryStatus::Processing);
    let v = settle(&fx, &probe, http(403), &policy).await;
    assert_eq!(
        v,
        Verdict::Held {
            probe_at: now(&fx).saturating_add(secs(3600))
        }
    );
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Held, 1));
    let attempts = fx.store().attempts(&t, d.id).await.expect("attempts");
    assert_eq!(
        attempts
            .iter()
            .map(|a| (a.number, a.probe))
            .collect::<Vec<_>>(),
        vec![(1, false), (2, true)]
    );
}

/// Probes while held spend nothing whatever they meet; a released probe goes back to
/// `held` with its attempts unchanged.
pub async fn held_probe_spends_no_attempt(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let policy = webhook_policy();
    let got = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &got, http(403), &policy).await;
    for outcome in [
        http(503),
        http(404),
        Outcome::Transport(ErrorClass::Timeout),
        http(401),
    ] {
        fx.clock().advance(secs(3600));
        let probe = claim_one(&fx, &for_webhooks()).await;
        assert!(probe.lease.is_probe());
        assert_eq!(probe.lease.attempts, 1);
        let v = settle(&fx, &probe, outcome, &policy).await;
        assert!(
            matches!(v, Verdict::Held { .. }),
            "a failed probe stays held: {v:?}"
        );
        assert_eq!(delivery(&fx, &t, got.delivery.id).await.attempts, 1);
    }
    fx.clock().advance(secs(3600));
    let probe = claim_one(&fx, &for_webhooks()).await;
    let r = fx
        .store()
        .release(std::slice::from_ref(&probe.lease), secs(5))
        .await
        .expect("release");
    assert_eq!(r.released, 1);
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Held, 1));
    assert_eq!(d.next_attempt_at, now(&fx).saturating_add(secs(5)));
    assert_eq!(
        fx.store().attempts(&t, d.id).await.expect("attempts").len(),
        5
    );
}

/// `release_held` makes the endpoint's held deliveries `pending` and due now, keeping
/// attempts; other endpoints' held deliveries stay.
pub async fn release_held_makes_due_now(fx: Fixture) {
    let e1 = add_endpoint(&fx, "acme", "*").await;
    let e2 = add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let acme = tenant("acme");
    for got in claim(&fx, &for_webhooks()).await {
        settle(&fx, &got, http(401), &webhook_policy()).await;
    }
    fx.clock().advance(secs(10));
    let n = fx
        .store()
        .release_held(&acme, e1.id)
        .await
        .expect("release_held");
    assert_eq!(n, 1);
    let all = list_all(&fx, &acme, &Default::default()).await;
    for d in &all {
        if d.destination.endpoint() == Some(e1.id) {
            assert_eq!(
                (d.status, d.attempts, d.next_attempt_at),
                (DeliveryStatus::Pending, 1, now(&fx))
            );
        } else {
            assert_eq!(d.destination.endpoint(), Some(e2.id));
            assert_eq!(d.status, DeliveryStatus::Held);
        }
    }
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.delivery.destination.endpoint(), Some(e1.id));
    assert_eq!(got.lease.claimed_from, DeliveryStatus::Pending);
    assert_eq!(got.lease.attempts, 2);
    assert_eq!(
        fx.store()
            .release_held(&acme, e1.id)
            .await
            .expect("release_held"),
        0
    );
}

/// A probe answered with a 2xx ends the delivery as `succeeded` without spending.
pub async fn held_probe_2xx_succeeds(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let policy = webhook_policy();
    let got = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &got, http(401), &policy).await;
    fx.clock().advance(secs(3600));
    let probe = claim_one(&fx, &for_webhooks()).await;
    assert!(probe.lease.is_probe());
    assert_eq!(
        settle(&fx, &probe, http(200), &policy).await,
        Verdict::Succeeded
    );
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Succeeded, 1));
    assert_eq!(d.completed_at, Some(now(&fx)));
    let attempts = fx
        .store()
        .attempts(&Default::default(), d.id)
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 2);
    assert!(attempts[1].probe);
    assert_eq!(attempts[1].record.status_code, Some(200));
}

/// A probe answered with 410 kills the delivery (`gone`) and disables the endpoint; the
/// probe spent nothing.
pub async fn held_probe_410_is_gone(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let acme = tenant("acme");
    let policy = webhook_policy();
    let got = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &got, http(401), &policy).await;
    fx.clock().advance(secs(3600));
    let probe = claim_one(&fx, &for_webhooks()).await;
    assert!(probe.lease.is_probe());
    let v = settle(&fx, &probe, http(410), &policy).await;
    assert_eq!(
        v,
        Verdict::Dead {
            reason: outboxkit_core::DeadReason::Gone
        }
    );
    let d = delivery(&fx, &acme, got.delivery.id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts),
        (
            DeliveryStatus::Dead,
            Some(outboxkit_core::DeadReason::Gone),
            1
        )
    );
    let ep = fx
        .store()
        .get_endpoint(&acme, e.id)
        .await
        .expect("get_endpoint");
    assert_eq!(
        ep.status,
        outboxkit_core::EndpointStatus::Disabled(outboxkit_core::DisabledReason::Gone)
    );
}
