//! Held deliveries (401/403): free probes, release on a 2xx or by an operator.

use outboxkit_core::{DeliveryStatus, ErrorClass, ErrorKind, Outcome, Verdict};

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

/// Probes that meet 401/403 again spend nothing and stay held; a released probe goes back
/// to `held` with its attempts unchanged.
pub async fn held_probe_spends_no_attempt(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let policy = webhook_policy();
    let got = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &got, http(403), &policy).await;
    for outcome in [http(401), http(403), http(401), http(403)] {
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

/// A probe that meets a 5xx or a timeout returns the delivery to the ordinary retry
/// schedule (seed 000): `pending`, due after the policy delay for the attempts spent, the
/// probe itself free; the next try spends an attempt as usual.
pub async fn held_probe_5xx_or_timeout_returns_to_schedule(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    enqueue(&fx, msg("order.updated")).await;
    let t = Default::default();
    let policy = webhook_policy();
    for got in claim(&fx, &for_webhooks()).await {
        settle(&fx, &got, http(401), &policy).await;
    }
    fx.clock().advance(secs(3600));
    let probes = claim(&fx, &for_webhooks()).await;
    assert_eq!(probes.len(), 2);
    for (probe, outcome) in probes
        .iter()
        .zip([http(503), Outcome::Transport(ErrorClass::Timeout)])
    {
        assert!(probe.lease.is_probe());
        let v = settle(&fx, probe, outcome, &policy).await;
        let at = now(&fx).saturating_add(secs(60));
        assert_eq!(v, Verdict::Retry { at });
        let d = delivery(&fx, &t, probe.delivery.id).await;
        assert_eq!(
            (d.status, d.attempts, d.next_attempt_at),
            (DeliveryStatus::Pending, 1, at)
        );
        let ledger = fx.store().attempts(&t, d.id).await.expect("attempts");
        assert_eq!(
            ledger.iter().map(|a| a.probe).collect::<Vec<_>>(),
            vec![false, true]
        );
    }
    fx.clock().advance(secs(59));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(1));
    for again in claim(&fx, &for_webhooks()).await {
        assert!(!again.lease.is_probe());
        assert_eq!(again.lease.attempts, 2);
        let v = settle(&fx, &again, http(503), &policy).await;
        assert_eq!(
            v,
            Verdict::Retry {
                at: now(&fx).saturating_add(secs(300))
            }
        );
    }
}

/// `reset` gives a held delivery a fresh budget by hand (seed 000 `retryDelivery`):
/// `pending`, due now, attempts and snoozes 0, its ledger kept. Other statuses are a
/// `Conflict`; another tenant's delivery, or an unknown one, is `NotFound`; nothing changes.
pub async fn reset_held_gives_fresh_budget(fx: Fixture) {
    add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    enqueue(&fx, msg("order.updated").tenant("acme")).await;
    let acme = tenant("acme");
    let policy = webhook_policy();
    let mut got = claim(&fx, &for_webhooks()).await;
    assert_eq!(got.len(), 2);
    let other = got.pop().expect("two claimed");
    let got = got.pop().expect("two claimed");
    settle(&fx, &got, http(503), &policy).await;
    // `other` is processing: not held.
    let before = delivery(&fx, &acme, other.delivery.id).await;
    assert_kind(
        fx.store().reset(&acme, other.delivery.id).await,
        ErrorKind::Conflict,
        "reset of a processing delivery",
    );
    assert_eq!(delivery(&fx, &acme, other.delivery.id).await, before);
    settle(&fx, &other, http(200), &policy).await;
    assert_kind(
        fx.store().reset(&acme, other.delivery.id).await,
        ErrorKind::Conflict,
        "reset of a succeeded delivery",
    );
    fx.clock().advance(secs(60));
    let second = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(second.lease.attempts, 2);
    settle(&fx, &second, http(401), &policy).await;
    let held = delivery(&fx, &acme, got.delivery.id).await;
    assert_eq!((held.status, held.attempts), (DeliveryStatus::Held, 2));

    assert_kind(
        fx.store().reset(&tenant("other"), got.delivery.id).await,
        ErrorKind::NotFound,
        "reset across tenants",
    );
    let unknown = outboxkit_core::DeliveryId::generate(now(&fx), &outboxkit_core::OsEntropy);
    assert_kind(
        fx.store().reset(&acme, unknown).await,
        ErrorKind::NotFound,
        "reset of an unknown delivery",
    );
    assert_eq!(delivery(&fx, &acme, got.delivery.id).await, held);

    fx.clock().advance(secs(10));
    fx.store()
        .reset(&acme, got.delivery.id)
        .await
        .expect("reset");
    let d = delivery(&fx, &acme, got.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.snoozes, d.next_attempt_at),
        (DeliveryStatus::Pending, 0, 0, now(&fx))
    );
    assert_eq!(
        fx.store()
            .attempts(&acme, d.id)
            .await
            .expect("attempts")
            .len(),
        2,
        "the ledger is kept"
    );
    assert_kind(
        fx.store().reset(&acme, got.delivery.id).await,
        ErrorKind::Conflict,
        "reset of a pending delivery",
    );
    let again = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(again.delivery.id, got.delivery.id);
    assert!(!again.lease.is_probe());
    assert_eq!(again.lease.attempts, 1);
    settle(&fx, &again, http(200), &policy).await;
    let ledger = fx.store().attempts(&acme, d.id).await.expect("attempts");
    assert_eq!(
        ledger.iter().map(|a| a.number).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}
