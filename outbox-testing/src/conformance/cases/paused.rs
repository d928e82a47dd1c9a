//! Paused consumers (`EndpointStore::set_consumer_status`): a paused consumer's deliveries
//! wait, `held` and due never, with no attempt spent; a resume releases them in enqueue
//! order, a delayed message keeping its time; a restart's `put_consumer` keeps the pause.

use outboxkit_core::{
    ConsumerName, ConsumerStatus, DeliveryStatus, Destination, ErrorKind, HandlerOutcome, Outcome,
    Timestamp, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Pause or resume, expecting success; returns the status stored.
async fn set(fx: &Fixture, name: &ConsumerName, status: ConsumerStatus) -> ConsumerStatus {
    let c = fx
        .store()
        .set_consumer_status(name, status)
        .await
        .expect("set_consumer_status");
    assert_eq!(&c.name, name);
    c.status
}

/// The status `list_consumers` shows for `name`.
async fn listed(fx: &Fixture, name: &ConsumerName) -> Option<ConsumerStatus> {
    fx.store()
        .list_consumers()
        .await
        .expect("list_consumers")
        .into_iter()
        .find(|c| &c.name == name)
        .map(|c| c.status)
}

/// Pausing holds the consumer's `pending` deliveries (of every tenant) and an enqueue while it
/// is paused writes its delivery `held`: due never, no attempt spent, never claimed however
/// long the pause, and shown held in listings and stats. Another consumer's are untouched;
/// one in flight when the pause lands finishes as it would.
pub async fn paused_consumer_holds_pending_and_new(fx: Fixture) {
    let billing = add_consumer(&fx, "billing", "*").await;
    let audit = add_consumer(&fx, "audit", "*").await;
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let in_flight = claim_one(&fx, &for_consumer(&billing)).await;
    enqueue(&fx, msg("order.updated").tenant("acme")).await;
    enqueue(&fx, msg("order.created").tenant("globex")).await;

    assert_eq!(
        set(&fx, &billing, ConsumerStatus::Paused).await,
        ConsumerStatus::Paused
    );
    assert_eq!(listed(&fx, &billing).await, Some(ConsumerStatus::Paused));
    assert_eq!(listed(&fx, &audit).await, Some(ConsumerStatus::Active));
    let late = enqueue(&fx, msg("order.paid").tenant("acme")).await;
    assert_eq!(
        late.deliveries, 2,
        "a paused consumer still gets its delivery"
    );

    for t in [&acme, &globex] {
        for d in list_all(&fx, t, &Default::default()).await {
            if d.id == in_flight.delivery.id {
                assert_eq!(
                    d.status,
                    DeliveryStatus::Processing,
                    "the running one runs on"
                );
            } else if matches!(&d.destination, Destination::Handler(n) if n == &billing) {
                assert_eq!(
                    (d.status, d.attempts, d.next_attempt_at),
                    (DeliveryStatus::Held, 0, Timestamp::MAX),
                    "a paused consumer's delivery waits"
                );
            } else {
                assert_eq!(
                    d.status,
                    DeliveryStatus::Pending,
                    "another consumer's is untouched"
                );
            }
        }
    }
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!((stats.held, stats.pending, stats.processing), (3, 4, 1));

    complete_with(
        &fx,
        &in_flight,
        Verdict::Succeeded,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;
    assert_eq!(
        delivery(&fx, &acme, in_flight.delivery.id).await.status,
        DeliveryStatus::Succeeded
    );
    fx.clock().advance(secs(90 * 24 * 3600));
    claim_none(&fx, &for_consumer(&billing)).await;
    assert_eq!(claim(&fx, &for_consumer(&audit)).await.len(), 4);
}

/// A resume makes the held deliveries pending, due now, attempts kept at 0; they are
/// claimed in enqueue order, per-key FIFO kept.
pub async fn resumed_consumer_releases_in_order(fx: Fixture) {
    let billing = add_consumer(&fx, "billing", "*").await;
    let acme = tenant("acme");
    set(&fx, &billing, ConsumerStatus::Paused).await;
    let m1 = enqueue(&fx, msg("order.created").tenant("acme").ordering_key("o-1")).await;
    fx.clock().advance(secs(1));
    let m2 = enqueue(&fx, msg("order.noted").tenant("acme")).await;
    fx.clock().advance(secs(1));
    let m3 = enqueue(&fx, msg("order.updated").tenant("acme").ordering_key("o-1")).await;
    fx.clock().advance(secs(3600));
    claim_none(&fx, &for_consumer(&billing)).await;

    assert_eq!(
        set(&fx, &billing, ConsumerStatus::Active).await,
        ConsumerStatus::Active
    );
    assert_eq!(listed(&fx, &billing).await, Some(ConsumerStatus::Active));
    for d in list_all(&fx, &acme, &Default::default()).await {
        assert_eq!(
            (d.status, d.attempts, d.next_attempt_at),
            (DeliveryStatus::Pending, 0, now(&fx))
        );
    }
    let first = claim(&fx, &for_consumer(&billing)).await;
    assert_eq!(
        first
            .iter()
            .map(|c| c.delivery.message_id)
            .collect::<Vec<_>>(),
        vec![m1.message_id, m2.message_id],
        "enqueue order; the second o-1 waits for the first"
    );
    for c in &first {
        assert_eq!(c.lease.attempts, 1, "the wait spent nothing");
        complete_with(&fx, c, Verdict::Succeeded, None).await;
    }
    let last = claim_one(&fx, &for_consumer(&billing)).await;
    assert_eq!(last.delivery.message_id, m3.message_id);
    assert_eq!(last.lease.attempts, 1);
    // A second resume releases nothing more.
    set(&fx, &billing, ConsumerStatus::Active).await;
    claim_none(&fx, &for_consumer(&billing)).await;
}

/// A delayed message published while the consumer was paused is due, after the resume, at
/// its own time, not at once.
pub async fn resumed_consumer_keeps_a_delayed_message(fx: Fixture) {
    let billing = add_consumer(&fx, "billing", "*").await;
    let acme = tenant("acme");
    set(&fx, &billing, ConsumerStatus::Paused).await;
    let t0 = now(&fx);
    let late = enqueue(&fx, msg("order.created").tenant("acme").delay(secs(600))).await;
    let plain = enqueue(&fx, msg("order.noted").tenant("acme")).await;
    fx.clock().advance(secs(60));
    set(&fx, &billing, ConsumerStatus::Active).await;
    for d in list_all(&fx, &acme, &Default::default()).await {
        let due = if d.message_id == late.message_id {
            t0.saturating_add(secs(600))
        } else {
            now(&fx)
        };
        assert_eq!(
            (d.status, d.next_attempt_at),
            (DeliveryStatus::Pending, due)
        );
    }
    let got = claim_one(&fx, &for_consumer(&billing)).await;
    assert_eq!(got.delivery.message_id, plain.message_id);
    complete_with(&fx, &got, Verdict::Succeeded, None).await;
    fx.clock().advance(secs(539));
    claim_none(&fx, &for_consumer(&billing)).await;
    fx.clock().advance(secs(1));
    let got = claim_one(&fx, &for_consumer(&billing)).await;
    assert_eq!(got.delivery.message_id, late.message_id);
}

/// `put_consumer` (a dispatcher's registration at every start) keeps an existing consumer's
/// pause while updating its filter; a new consumer, or one deleted and registered again, is
/// active.
pub async fn put_consumer_keeps_a_pause(fx: Fixture) {
    let billing = add_consumer(&fx, "billing", "*").await;
    assert_eq!(listed(&fx, &billing).await, Some(ConsumerStatus::Active));
    set(&fx, &billing, ConsumerStatus::Paused).await;
    add_consumer(&fx, "billing", "order.*").await;
    let stored = fx
        .store()
        .list_consumers()
        .await
        .expect("list_consumers")
        .into_iter()
        .find(|c| c.name == billing)
        .expect("billing");
    assert_eq!(
        (stored.status, stored.filter.to_string()),
        (ConsumerStatus::Paused, "order.*".to_owned()),
        "the registration updates the filter and keeps the pause"
    );
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let d = only_delivery(&fx, &tenant("acme")).await;
    assert_eq!(d.status, DeliveryStatus::Held);
    claim_none(&fx, &for_consumer(&billing)).await;

    fx.store()
        .delete_consumer(&billing)
        .await
        .expect("delete_consumer");
    add_consumer(&fx, "billing", "*").await;
    assert_eq!(
        listed(&fx, &billing).await,
        Some(ConsumerStatus::Active),
        "registered again after a delete, it starts active"
    );
}

/// Pausing or resuming a consumer that is not registered is `NotFound` and changes nothing.
pub async fn pausing_an_unknown_consumer_is_not_found(fx: Fixture) {
    let billing = add_consumer(&fx, "billing", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let ghost = ConsumerName::new("ghost").expect("a valid name");
    for status in [ConsumerStatus::Paused, ConsumerStatus::Active] {
        assert_kind(
            fx.store().set_consumer_status(&ghost, status).await,
            ErrorKind::NotFound,
            "an unknown consumer",
        );
    }
    let all = fx.store().list_consumers().await.expect("list_consumers");
    assert_eq!(
        all.iter()
            .map(|c| (c.name.as_str(), c.status))
            .collect::<Vec<_>>(),
        vec![("billing", ConsumerStatus::Active)]
    );
    assert_eq!(
        only_delivery(&fx, &tenant("acme")).await.status,
        DeliveryStatus::Pending
    );
    claim_one(&fx, &for_consumer(&billing)).await;
}
