//! Deliveries held for their endpoint: a paused or disabled endpoint keeps what is published
//! (resume and re-enable send it in order, a disabled endpoint's hold
//! expires, a deleted endpoint gets nothing.

use outboxkit_core::endpoint::DISABLED_HOLD;
use outboxkit_core::{
    DeadReason, DeliveryStatus, DisabledReason, EndpointId, EndpointStatus, EndpointUpdate,
    Outcome, TenantId, Timestamp, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Set an endpoint's status through `update_endpoint`.
async fn set_status(fx: &Fixture, t: &TenantId, id: EndpointId, status: EndpointStatus) {
    let update = EndpointUpdate {
        status: Some(status),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(t, id, &update)
        .await
        .expect("update_endpoint");
}

/// Messages published while an endpoint is paused get their deliveries, `held` for the
/// endpoint: never claimed however long the pause, no attempt spent, no ledger entry. The
/// resume makes them due at once; they go out in enqueue order, per-key FIFO kept.
pub async fn paused_endpoint_holds_then_resumes_in_order(fx: Fixture) {
    let e = add_endpoint_with(&fx, "acme", "*", EndpointStatus::Paused).await;
    let acme = tenant("acme");
    let m1 = enqueue(&fx, msg("order.created").tenant("acme").ordering_key("o-1")).await;
    fx.clock().advance(secs(1));
    let m2 = enqueue(&fx, msg("order.noted").tenant("acme")).await;
    fx.clock().advance(secs(1));
    let m3 = enqueue(&fx, msg("order.updated").tenant("acme").ordering_key("o-1")).await;
    for m in [&m1, &m2, &m3] {
        assert_eq!(m.deliveries, 1, "a paused endpoint still gets its delivery");
    }
    let all = list_all(&fx, &acme, &Default::default()).await;
    assert_eq!(all.len(), 3);
    for d in &all {
        assert_eq!(
            (d.status, d.attempts, d.next_attempt_at),
            (DeliveryStatus::Held, 0, Timestamp::MAX)
        );
    }
    fx.clock().advance(secs(90 * 24 * 3600));
    claim_none(&fx, &for_webhooks()).await;
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!(
        (stats.held, stats.pending, stats.oldest_due_at),
        (3, 0, None)
    );

    set_status(&fx, &acme, e.id, EndpointStatus::Active).await;
    for d in list_all(&fx, &acme, &Default::default()).await {
        assert_eq!(
            (d.status, d.attempts, d.next_attempt_at),
            (DeliveryStatus::Pending, 0, now(&fx))
        );
    }
    let first = claim(&fx, &for_webhooks()).await;
    let order: Vec<_> = first.iter().map(|c| c.delivery.message_id).collect();
    assert_eq!(
        order,
        vec![m1.message_id, m2.message_id],
        "enqueue order; the second o-1 waits for the first"
    );
    for c in &first {
        assert_eq!(c.lease.attempts, 1, "the wait spent nothing");
        settle(&fx, c, http(200), &webhook_policy()).await;
    }
    let last = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(last.delivery.message_id, m3.message_id);
    assert_eq!(last.lease.attempts, 1);
    for d in list_all(&fx, &acme, &Default::default()).await {
        let ledger = fx.store().attempts(&acme, d.id).await.expect("attempts");
        assert!(ledger.len() <= 1, "no ledger entry for the wait");
    }
}

/// Pausing holds what was already queued: the endpoint's `pending` and `held` (401)
/// deliveries wait for it; another endpoint's are untouched; a resume makes them due now
/// with their attempts kept.
pub async fn pause_holds_queued_deliveries(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let other = add_endpoint(&fx, "acme", "*").await;
    let acme = tenant("acme");
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    for got in claim(&fx, &for_webhooks()).await {
        if got.delivery.destination.endpoint() == Some(e.id) {
            settle(&fx, &got, http(401), &webhook_policy()).await;
        } else {
            settle(&fx, &got, http(200), &webhook_policy()).await;
        }
    }
    enqueue(&fx, msg("order.updated").tenant("acme")).await;
    set_status(&fx, &acme, e.id, EndpointStatus::Paused).await;
    let mine = |d: &outboxkit_core::Delivery| d.destination.endpoint() == Some(e.id);
    for d in list_all(&fx, &acme, &Default::default()).await {
        if mine(&d) {
            assert_eq!(
                (d.status, d.next_attempt_at),
                (DeliveryStatus::Held, Timestamp::MAX)
            );
        }
    }
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.delivery.destination.endpoint(), Some(other.id));
    settle(&fx, &got, http(200), &webhook_policy()).await;
    fx.clock().advance(secs(2 * 3600));
    claim_none(&fx, &for_webhooks()).await;

    set_status(&fx, &acme, e.id, EndpointStatus::Active).await;
    let mut attempts = Vec::new();
    for d in list_all(&fx, &acme, &Default::default()).await {
        if mine(&d) {
            assert_eq!(
                (d.status, d.next_attempt_at),
                (DeliveryStatus::Pending, now(&fx))
            );
            attempts.push(d.attempts);
        }
    }
    attempts.sort_unstable();
    assert_eq!(attempts, vec![0, 1], "attempts are kept");
    assert_eq!(claim(&fx, &for_webhooks()).await.len(), 2);
}

/// A disabled endpoint keeps what arrives, `held` until `DISABLED_HOLD` has passed;
/// re-enabling it within that window sends everything in order, nothing spent.
pub async fn disabled_endpoint_holds_until_reenabled(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let acme = tenant("acme");
    set_status(
        &fx,
        &acme,
        e.id,
        EndpointStatus::Disabled(DisabledReason::Manual),
    )
    .await;
    let m1 = enqueue(&fx, msg("order.created").tenant("acme")).await;
    fx.clock().advance(secs(1));
    let m2 = enqueue(&fx, msg("order.updated").tenant("acme")).await;
    assert_eq!((m1.deliveries, m2.deliveries), (1, 1));
    for d in list_all(&fx, &acme, &Default::default()).await {
        assert_eq!(d.status, DeliveryStatus::Held);
        assert_eq!(d.attempts, 0);
    }
    fx.clock().advance(DISABLED_HOLD.saturating_sub(secs(2)));
    claim_none(&fx, &for_webhooks()).await;
    set_status(&fx, &acme, e.id, EndpointStatus::Active).await;
    let got = claim(&fx, &for_webhooks()).await;
    assert_eq!(
        got.iter()
            .map(|c| c.delivery.message_id)
            .collect::<Vec<_>>(),
        vec![m1.message_id, m2.message_id]
    );
    for c in &got {
        assert!(!c.lease.is_probe());
        assert_eq!(c.lease.attempts, 1);
        assert_eq!(
            settle(&fx, c, http(200), &webhook_policy()).await,
            Verdict::Succeeded
        );
    }
}

/// Past `DISABLED_HOLD` a disabled endpoint's waiting delivery is claimed once more and
/// dies as `endpoint-disabled`, spending nothing; a 410 disables the endpoint so that what
/// arrives next waits too.
pub async fn disabled_endpoint_hold_expires(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let acme = tenant("acme");
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let got = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &got, http(410), &webhook_policy()).await;
    let ep = fx.store().get_endpoint(&acme, e.id).await.expect("get");
    assert_eq!(ep.status, EndpointStatus::Disabled(DisabledReason::Gone));
    let late = enqueue(&fx, msg("order.updated").tenant("acme")).await;
    assert_eq!(late.deliveries, 1);
    let d = list_all(&fx, &acme, &Default::default())
        .await
        .into_iter()
        .find(|d| d.message_id == late.message_id)
        .expect("the late delivery");
    assert_eq!(
        (d.status, d.next_attempt_at),
        (DeliveryStatus::Held, now(&fx).saturating_add(DISABLED_HOLD))
    );
    fx.clock().advance(DISABLED_HOLD.saturating_sub(secs(1)));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(1));
    let expired = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(expired.delivery.id, d.id);
    assert!(expired.lease.is_probe());
    let v = settle(&fx, &expired, Outcome::EndpointDisabled, &webhook_policy()).await;
    assert_eq!(
        v,
        Verdict::Dead {
            reason: DeadReason::EndpointDisabled
        }
    );
    let d = delivery(&fx, &acme, d.id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts),
        (DeliveryStatus::Dead, Some(DeadReason::EndpointDisabled), 0)
    );
    assert!(fx
        .store()
        .attempts(&acme, d.id)
        .await
        .expect("attempts")
        .is_empty());
}

/// Deleting an endpoint ends its wait: its held deliveries become due and die as
/// `endpoint-removed` at the next claim; a deleted endpoint gets nothing new.
pub async fn deleted_endpoint_gets_nothing(fx: Fixture) {
    let e = add_endpoint_with(&fx, "acme", "*", EndpointStatus::Paused).await;
    let acme = tenant("acme");
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    fx.clock().advance(secs(5));
    fx.store()
        .delete_endpoint(&acme, e.id)
        .await
        .expect("delete_endpoint");
    assert_eq!(
        enqueue(&fx, msg("order.updated").tenant("acme"))
            .await
            .deliveries,
        0
    );
    let d = only_delivery(&fx, &acme).await;
    assert_eq!(
        (d.status, d.next_attempt_at),
        (DeliveryStatus::Pending, now(&fx))
    );
    let got = claim_one(&fx, &for_webhooks()).await;
    let v = settle(&fx, &got, Outcome::EndpointMissing, &webhook_policy()).await;
    assert_eq!(
        v,
        Verdict::Dead {
            reason: DeadReason::EndpointRemoved
        }
    );
    let d = delivery(&fx, &acme, d.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Dead, 0));
}

/// A delivery that met its endpoint paused but completes after the resume (or after the
/// endpoint was deleted) does not wait for good: the store writes it `pending`, due now,
/// the attempt refunded. While the endpoint is still paused it waits.
pub async fn await_endpoint_after_resume_is_pending(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let gone = add_endpoint(&fx, "acme", "*").await;
    let acme = tenant("acme");
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let wait = Verdict::AwaitEndpoint {
        until: Timestamp::MAX,
    };
    // The dispatcher read the endpoints as paused; then one was resumed, one deleted.
    let claimed = claim(&fx, &for_webhooks()).await;
    assert_eq!(claimed.len(), 2);
    set_status(&fx, &acme, e.id, EndpointStatus::Paused).await;
    set_status(&fx, &acme, e.id, EndpointStatus::Active).await;
    fx.store()
        .delete_endpoint(&acme, gone.id)
        .await
        .expect("delete_endpoint");
    fx.clock().advance(secs(1));
    for c in &claimed {
        complete_with(&fx, c, wait.clone(), None).await;
        let d = delivery(&fx, &acme, c.delivery.id).await;
        assert_eq!(
            (d.status, d.attempts, d.next_attempt_at),
            (DeliveryStatus::Pending, 0, now(&fx)),
            "{:?}",
            d.destination
        );
    }
    // Still paused: it waits.
    let again = claim(&fx, &for_webhooks()).await;
    assert_eq!(again.len(), 2);
    set_status(&fx, &acme, e.id, EndpointStatus::Paused).await;
    for c in &again {
        if c.delivery.destination.endpoint() == Some(e.id) {
            complete_with(&fx, c, wait.clone(), None).await;
            let d = delivery(&fx, &acme, c.delivery.id).await;
            assert_eq!(
                (d.status, d.attempts, d.next_attempt_at),
                (DeliveryStatus::Held, 0, Timestamp::MAX)
            );
        } else {
            let v = settle(&fx, c, Outcome::EndpointMissing, &webhook_policy()).await;
            assert_eq!(
                v,
                Verdict::Dead {
                    reason: DeadReason::EndpointRemoved
                }
            );
        }
    }
}

/// Rotating the secret of (or moving) a paused or disabled endpoint leaves what waits for it
/// as it was: still `held`, the disabled hold not restarted, nothing reported as due; the
/// resume or re-enable then releases it.
pub async fn rotating_a_waiting_endpoints_secret_keeps_its_hold(fx: Fixture) {
    let acme = tenant("acme");
    let paused = add_endpoint_with(&fx, "acme", "*", EndpointStatus::Paused).await;
    let disabled = add_endpoint(&fx, "acme", "*").await;
    set_status(
        &fx,
        &acme,
        disabled.id,
        EndpointStatus::Disabled(DisabledReason::Manual),
    )
    .await;
    let disabled_until = now(&fx).saturating_add(DISABLED_HOLD);
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let waits = |id: EndpointId| {
        if id == paused.id {
            Timestamp::MAX
        } else {
            disabled_until
        }
    };
    let check = |all: Vec<outboxkit_core::Delivery>| {
        assert_eq!(all.len(), 2);
        for d in all {
            let outboxkit_core::Destination::Webhook(id) = d.destination else {
                panic!("only webhook deliveries were enqueued")
            };
            assert_eq!(
                (d.status, d.attempts, d.next_attempt_at),
                (DeliveryStatus::Held, 0, waits(id)),
                "a rotation changed what waits for {id}"
            );
        }
    };
    check(list_all(&fx, &acme, &Default::default()).await);
    for round in 0..2u8 {
        fx.clock().advance(secs(3600));
        for e in [&paused, &disabled] {
            let rotate = EndpointUpdate {
                rotate_secret: Some(outboxkit_core::SealedSecret(vec![round; 8])),
                ..Default::default()
            };
            fx.store()
                .update_endpoint(&acme, e.id, &rotate)
                .await
                .expect("rotate");
            let moved = EndpointUpdate {
                url: Some(
                    outboxkit_core::EndpointUrl::parse("https://moved.example/h").expect("url"),
                ),
                ..Default::default()
            };
            fx.store()
                .update_endpoint(&acme, e.id, &moved)
                .await
                .expect("move");
        }
        check(list_all(&fx, &acme, &Default::default()).await);
        let stats = fx.store().stats().await.expect("stats");
        assert_eq!(
            (stats.held, stats.pending, stats.oldest_due_at),
            (2, 0, None)
        );
        claim_none(&fx, &for_webhooks()).await;
    }
    set_status(&fx, &acme, paused.id, EndpointStatus::Active).await;
    set_status(&fx, &acme, disabled.id, EndpointStatus::Active).await;
    assert_eq!(claim(&fx, &for_webhooks()).await.len(), 2);
}
