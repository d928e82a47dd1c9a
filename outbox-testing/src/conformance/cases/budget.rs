//! Attempt budgets and sources at claim time: exhausted rows die at the claim (beyond its
//! batch too), a claim serves only its named sources, and budgets are per source.

use outboxkit_core::{
    ClaimRequest, DeadReason, DeliveryFilter, DeliveryStatus, HandlerOutcome, Outcome, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Rows at or past the claim's budget die as `max_attempts` at claim time and are never
/// handed out; held rows are exempt (a probe is free); unserved rows are untouched.
pub async fn exhausted_rows_die_at_claim(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let other = add_consumer(&fx, "bystander", "nothing.here").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let budget = |n| ClaimRequest::new(10, LEASE).handler(c.clone(), n);
    for n in 1..=2 {
        let got = claim_one(&fx, &budget(2)).await;
        assert_eq!(got.lease.attempts, n);
        complete_with(
            &fx,
            &got,
            Verdict::Retry { at: now(&fx) },
            Some(Outcome::Handler(HandlerOutcome::Retry)),
        )
        .await;
    }
    let id = only_delivery(&fx, &t).await.id;
    claim_none(&fx, &ClaimRequest::new(10, LEASE).handler(other.clone(), 1)).await;
    assert_eq!(
        delivery(&fx, &t, id).await.status,
        DeliveryStatus::Pending,
        "an unserved row is untouched"
    );
    claim_none(&fx, &budget(2)).await;
    let d = delivery(&fx, &t, id).await;
    assert_eq!(d.status, DeliveryStatus::Dead);
    assert_eq!(d.dead_reason, Some(DeadReason::MaxAttempts));
    assert_eq!(d.completed_at, Some(now(&fx)));
    assert_eq!(d.lease_until, None);
    assert_eq!(d.attempts, 2);
    claim_none(&fx, &budget(10)).await;

    let e = add_endpoint(&fx, "default", "hook.*").await;
    enqueue(&fx, msg("hook.fired")).await;
    let hooks = ClaimRequest::new(10, LEASE).webhooks(1);
    let got = claim_one(&fx, &hooks).await;
    let spent = settle(&fx, &got, http(500), &webhook_policy()).await;
    let Verdict::Retry { at } = spent else {
        panic!("a 500 is retried, not {spent:?}");
    };
    fx.clock().set(at);
    claim_none(&fx, &hooks.clone().exclude_endpoints([e.id])).await;
    assert_eq!(
        delivery(&fx, &t, got.delivery.id).await.status,
        DeliveryStatus::Pending,
        "an exhausted row of an excluded endpoint is untouched"
    );
    claim_none(&fx, &hooks).await;
    assert_eq!(
        delivery(&fx, &t, got.delivery.id).await.status,
        DeliveryStatus::Dead,
        "and dies at the next claim that serves it"
    );

    enqueue(&fx, msg("hook.fired")).await;
    let got = claim_one(&fx, &hooks).await;
    let v = settle(&fx, &got, http(401), &webhook_policy()).await;
    assert!(matches!(v, Verdict::Held { .. }));
    fx.clock().advance(secs(3600));
    let probe = claim_one(&fx, &hooks).await;
    assert_eq!(probe.delivery.destination.endpoint(), Some(e.id));
    assert!(
        probe.lease.is_probe(),
        "a held row at its budget is probed, not killed"
    );
    assert_eq!(probe.lease.attempts, 1);
}

/// A claim takes only what its sources serve.
pub async fn claim_serves_only_named_sources(fx: Fixture) {
    let c1 = add_consumer(&fx, "first", "*").await;
    let c2 = add_consumer(&fx, "second", "*").await;
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created").email("someone@example.com")).await;
    enqueue(&fx, msg("invoice.paid")).await;
    let got = claim(&fx, &for_consumer(&c1)).await;
    assert_eq!(got.len(), 2);
    assert!(got
        .iter()
        .all(|g| g.delivery.destination == outboxkit_core::Destination::Handler(c1.clone())));
    let mut topics: Vec<_> = got.iter().map(|g| g.message.topic.clone()).collect();
    topics.sort();
    assert_eq!(topics, vec![topic("invoice.paid"), topic("order.created")]);
    let hooks = claim(&fx, &for_webhooks()).await;
    assert_eq!(hooks.len(), 2);
    assert!(hooks
        .iter()
        .all(|h| h.delivery.destination.endpoint().is_some()));
    let mail = claim_one(&fx, &for_email()).await;
    assert_eq!(
        mail.delivery.destination.kind(),
        outboxkit_core::DestinationKind::Email
    );
    let both = claim(&fx, &for_consumer(&c1).handler(c2.clone(), 10)).await;
    assert_eq!(both.len(), 2, "the second consumer's two");
    claim_none(&fx, &for_consumer(&c1).handler(c2, 10).webhooks(6).email(6)).await;
}

/// A claim kills every exhausted due row of its sources, not only the ones its batch
/// reaches: rows whose lease ended with the budget spent die even when a batch of one is
/// filled by another row (a store split in shards must kill them in every shard).
pub async fn claim_kills_exhausted_rows_beyond_its_batch(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let t = Default::default();
    let req = |batch| ClaimRequest::new(batch, LEASE).handler(c.clone(), 1);
    // Distinct ordering keys spread the rows over a sharded store's shards.
    for i in 0..8 {
        enqueue(&fx, msg("order.created").ordering_key(format!("k{i}"))).await;
    }
    let stranded = claim(&fx, &req(10)).await;
    assert_eq!(stranded.len(), 8);
    fx.clock().advance(LEASE + secs(1));
    let fresh = enqueue(&fx, msg("order.shipped")).await;
    let got = claim_one(&fx, &req(1)).await;
    assert_eq!(
        got.delivery.message_id, fresh.message_id,
        "only the fresh row is claimable"
    );
    for s in &stranded {
        let d = delivery(&fx, &t, s.delivery.id).await;
        assert_eq!(
            (d.status, d.dead_reason, d.attempts, d.lease_until),
            (DeliveryStatus::Dead, Some(DeadReason::MaxAttempts), 1, None),
            "an exhausted row dies at the claim even when the batch is full"
        );
    }
}

/// A last attempt that comes back pending (a retry verdict the store is asked to write as
/// it is) dies at the next claim without taking a place in its batch: a claim of one still
/// hands out the next due row (core's `claim_rules`: exhausted rows die first).
pub async fn a_retried_last_attempt_dies_without_a_place_in_the_batch(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let t = Default::default();
    let req = ClaimRequest::new(1, LEASE).handler(c.clone(), 1);
    let first = enqueue(&fx, msg("order.created")).await;
    let second = enqueue(&fx, msg("order.created")).await;
    let got = claim_one(&fx, &req).await;
    assert_eq!(got.delivery.message_id, first.message_id);
    complete_with(&fx, &got, Verdict::Retry { at: now(&fx) }, None).await;
    let next = claim_one(&fx, &req).await;
    assert_eq!(
        next.delivery.message_id, second.message_id,
        "the exhausted row took the batch's only place"
    );
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts, d.lease_until),
        (DeliveryStatus::Dead, Some(DeadReason::MaxAttempts), 1, None)
    );
}

/// A last attempt completed with a retry later holds its ordering key until it is due (when
/// the claim kills it): a newer row of the key waits, an unkeyed row does not.
pub async fn a_retried_last_attempt_holds_its_key_until_it_is_due(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let req = ClaimRequest::new(1, LEASE).handler(c.clone(), 1);
    let keyed = enqueue(&fx, msg("order.created").ordering_key("k")).await;
    let got = claim_one(&fx, &req).await;
    assert_eq!(got.delivery.message_id, keyed.message_id);
    let later = now(&fx).saturating_add(secs(30));
    complete_with(&fx, &got, Verdict::Retry { at: later }, None).await;
    let newer = enqueue(&fx, msg("order.created").ordering_key("k")).await;
    let free = enqueue(&fx, msg("order.created")).await;
    let next = claim_one(&fx, &req).await;
    assert_eq!(
        next.delivery.message_id, free.message_id,
        "the newer row of the key waits for the retried last attempt"
    );
    fx.clock().advance(secs(30));
    let after = claim_one(&fx, &req).await;
    assert_eq!(
        after.delivery.message_id, newer.message_id,
        "once due, the last attempt dies and lets the key go"
    );
}

/// Budgets are per source: one claim may kill a row for one consumer and hand out the
/// same message's row for another.
pub async fn claim_budget_is_per_source(fx: Fixture) {
    let tight = add_consumer(&fx, "tight", "*").await;
    let loose = add_consumer(&fx, "loose", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let both = |a: u32, b: u32| {
        ClaimRequest::new(10, LEASE)
            .handler(tight.clone(), a)
            .handler(loose.clone(), b)
    };
    let first = claim(&fx, &both(5, 5)).await;
    assert_eq!(first.len(), 2);
    for c in &first {
        complete_with(&fx, c, Verdict::Retry { at: now(&fx) }, None).await;
    }
    let second = claim_one(&fx, &both(1, 5)).await;
    assert_eq!(
        second.delivery.destination,
        outboxkit_core::Destination::Handler(loose.clone())
    );
    assert_eq!(second.lease.attempts, 2);
    let dead = list_all(
        &fx,
        &Default::default(),
        &DeliveryFilter {
            consumer: Some(tight.clone()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].status, dead[0].dead_reason, dead[0].attempts),
        (DeliveryStatus::Dead, Some(DeadReason::MaxAttempts), 1)
    );
}
