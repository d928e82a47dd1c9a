//! Delayed messages and releases: a held delivery that is released (a resume, a re-enable,
//! `release_held`, a new URL or secret) is due at the later of now and its message's
//! `available_at`, so a delayed message published while its endpoint waited keeps its time.

use outboxkit_core::{
    DeliveryStatus, DisabledReason, EndpointStatus, EndpointUpdate, SealedSecret, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Messages published while the endpoint is paused, some delayed: after the resume, each is
/// due at the later of the resume and its own time, so a delayed one is not claimable before
/// its time (and is then); a delayed row still holds its ordering key back.
pub async fn resume_keeps_a_delayed_message_until_its_time(fx: Fixture) {
    let e = add_endpoint_with(&fx, "acme", "*", EndpointStatus::Paused).await;
    let acme = tenant("acme");
    let t0 = now(&fx);
    let late = enqueue(&fx, msg("order.created").tenant("acme").delay(secs(600))).await;
    let keyed = enqueue(
        &fx,
        msg("order.updated")
            .tenant("acme")
            .ordering_key("o-1")
            .delay(secs(300)),
    )
    .await;
    let plain = enqueue(&fx, msg("order.noted").tenant("acme")).await;
    let behind = enqueue(&fx, msg("order.paid").tenant("acme").ordering_key("o-1")).await;
    fx.clock().advance(secs(60));
    let resume = EndpointUpdate {
        status: Some(EndpointStatus::Active),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&acme, e.id, &resume)
        .await
        .expect("resume");
    let due_of = |id| {
        let fx = &fx;
        let acme = &acme;
        async move {
            list_all(fx, acme, &Default::default())
                .await
                .into_iter()
                .find(|d| d.message_id == id)
                .map(|d| (d.status, d.next_attempt_at))
                .expect("the delivery")
        }
    };
    assert_eq!(
        due_of(late.message_id).await,
        (DeliveryStatus::Pending, t0.saturating_add(secs(600)))
    );
    assert_eq!(
        due_of(keyed.message_id).await,
        (DeliveryStatus::Pending, t0.saturating_add(secs(300)))
    );
    assert_eq!(
        due_of(plain.message_id).await,
        (DeliveryStatus::Pending, now(&fx))
    );
    let first = claim(&fx, &for_webhooks()).await;
    assert_eq!(
        first
            .iter()
            .map(|c| c.delivery.message_id)
            .collect::<Vec<_>>(),
        vec![plain.message_id],
        "the delayed ones wait for their time; the o-1 row behind a delayed one waits too"
    );
    settle(&fx, &first[0], http(200), &webhook_policy()).await;
    fx.clock().advance(secs(239));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(1));
    let keyed_got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(keyed_got.delivery.message_id, keyed.message_id);
    assert_eq!(keyed_got.lease.attempts, 1, "the wait spent nothing");
    settle(&fx, &keyed_got, http(200), &webhook_policy()).await;
    let behind_got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(behind_got.delivery.message_id, behind.message_id);
    settle(&fx, &behind_got, http(200), &webhook_policy()).await;
    fx.clock().advance(secs(299));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(1));
    let late_got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(late_got.delivery.message_id, late.message_id);
    assert_eq!(late_got.lease.attempts, 1);
}

/// `release_held` (and a re-enable) of a delayed message's held delivery makes it `pending`,
/// due at its message's time, not now; it is claimable then.
pub async fn release_held_keeps_a_delayed_message_until_its_time(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let acme = tenant("acme");
    let disable = EndpointUpdate {
        status: Some(EndpointStatus::Disabled(DisabledReason::Manual)),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&acme, e.id, &disable)
        .await
        .expect("disable");
    let t0 = now(&fx);
    let m = enqueue(&fx, msg("order.created").tenant("acme").delay(secs(3600))).await;
    assert_eq!(only_delivery(&fx, &acme).await.status, DeliveryStatus::Held);
    fx.clock().advance(secs(10));
    let n = fx
        .store()
        .release_held(&acme, e.id)
        .await
        .expect("release_held");
    assert_eq!(n, 1);
    let d = only_delivery(&fx, &acme).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Pending, 0, t0.saturating_add(secs(3600)))
    );
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(3589));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(1));
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.delivery.message_id, m.message_id);
    assert_eq!(got.lease.claimed_from, DeliveryStatus::Pending);
}

/// A delivery held by a 401 is released by a secret rotation at once: its message's time has
/// passed (it was attempted) and the probe's due time is not the message's delay, so it is
/// due now. A delayed message to the same endpoint, `pending` all along, keeps its time.
pub async fn secret_rotation_releases_a_probe_now_not_a_delayed_message(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let acme = tenant("acme");
    let first = enqueue(&fx, msg("order.created").tenant("acme").delay(secs(10))).await;
    fx.clock().advance(secs(10));
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.delivery.message_id, first.message_id);
    let v = settle(&fx, &got, http(401), &webhook_policy()).await;
    assert!(matches!(v, Verdict::Held { .. }), "{v:?}");
    let t1 = now(&fx);
    let later = enqueue(&fx, msg("order.updated").tenant("acme").delay(secs(600))).await;
    fx.clock().advance(secs(60));
    let rotate = EndpointUpdate {
        rotate_secret: Some(SealedSecret(vec![7; 8])),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&acme, e.id, &rotate)
        .await
        .expect("rotate");
    for d in list_all(&fx, &acme, &Default::default()).await {
        let want = if d.message_id == first.message_id {
            (DeliveryStatus::Pending, 1, now(&fx))
        } else {
            assert_eq!(d.message_id, later.message_id);
            (DeliveryStatus::Pending, 0, t1.saturating_add(secs(600)))
        };
        assert_eq!((d.status, d.attempts, d.next_attempt_at), want);
    }
    let probe = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(probe.delivery.message_id, first.message_id);
    assert_eq!(probe.lease.attempts, 2);
    settle(&fx, &probe, http(200), &webhook_policy()).await;
    claim_none(&fx, &for_webhooks()).await;
}
