//! The claim protocol: due order, batches, exclusivity, leases, fencing, ordering keys
//! (budgets and sources at claim time are in `budget.rs`).

use std::collections::BTreeSet;

use outboxkit_core::{
    ClaimRequest, ClaimToken, Completion, DeadReason, DeliveryFilter, DeliveryStatus, ErrorKind,
    HandlerOutcome, Lease, OsEntropy, Outcome, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Due deliveries come out oldest first by `(next_attempt_at, enqueue order)`, at most
/// `batch_size` at a time; deliveries not yet due stay.
pub async fn claim_takes_due_oldest_first_up_to_batch(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let m1 = enqueue(&fx, msg("t.one").delay(secs(3))).await;
    let m2 = enqueue(&fx, msg("t.two").delay(secs(1))).await;
    let m3 = enqueue(&fx, msg("t.three")).await;
    let m4 = enqueue(&fx, msg("t.four")).await;
    let m5 = enqueue(&fx, msg("t.five").delay(secs(3600))).await;
    fx.clock().advance(secs(5));
    // A day-long lease: nothing claimed here comes back as a stranded claim.
    let one = |n: u32| ClaimRequest::new(n, secs(86_400)).handler(c.clone(), 10);
    let first = claim_one(&fx, &one(1)).await;
    assert_eq!(
        first.message.id, m3.message_id,
        "ties on due time go in enqueue order"
    );
    let next = claim(&fx, &one(2)).await;
    let got: BTreeSet<_> = next.iter().map(|x| x.message.id).collect();
    assert_eq!(got, [m4.message_id, m2.message_id].into_iter().collect());
    let rest = claim(&fx, &one(10)).await;
    assert_eq!(
        rest.iter().map(|x| x.message.id).collect::<Vec<_>>(),
        vec![m1.message_id]
    );
    claim_none(&fx, &one(10)).await;
    fx.clock().advance(secs(3600));
    let last = claim_one(&fx, &one(10)).await;
    assert_eq!(last.message.id, m5.message_id);
}

/// A delayed message is not claimable before its time and is at exactly its time.
pub async fn delayed_message_appears_when_due(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let t0 = now(&fx);
    let long = &ClaimRequest::new(10, secs(86_400)).handler(c.clone(), 10);
    let e = enqueue(&fx, msg("order.created").delay(secs(60))).await;
    let at = enqueue(
        &fx,
        msg("order.created").available_at(t0.saturating_add(secs(120))),
    )
    .await;
    let m = fx
        .store()
        .get_message(&Default::default(), e.message_id)
        .await
        .expect("get_message");
    assert_eq!(m.available_at, t0.saturating_add(secs(60)));
    claim_none(&fx, long).await;
    fx.clock().advance(secs(59));
    claim_none(&fx, long).await;
    fx.clock().advance(secs(1));
    let got = claim_one(&fx, long).await;
    assert_eq!(got.message.id, e.message_id);
    fx.clock().advance(secs(59));
    claim_none(&fx, long).await;
    fx.clock().advance(secs(1));
    let got = claim_one(&fx, long).await;
    assert_eq!(got.message.id, at.message_id);
}

/// Many concurrent claimers on independent handles never receive the same delivery while
/// its lease is live.
pub async fn claim_is_exclusive(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let batch: Vec<_> = (0..200)
        .map(|i| msg("order.created").ordering_key(format!("k{i}")))
        .collect();
    let out = fx
        .store()
        .enqueue_batch(batch)
        .await
        .expect("enqueue_batch");
    assert_eq!(out.len(), 200);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = fx.second_handle().await;
        let req = ClaimRequest::new(7, secs(600)).handler(c.clone(), 10);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store.claim(&req).await.expect("claim");
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|c| c.delivery.id));
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for t in tasks {
        for id in t.await.expect("claimer task") {
            total += 1;
            assert!(seen.insert(id), "delivery {id} was handed out twice");
        }
    }
    assert_eq!(total, 200);
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!((stats.processing, stats.pending), (200, 0));
}

/// A stranded claim is due again at its lease end and takes its place in the due order there
/// (§6.1), however the store keeps it: deliveries that fell due while it was leased come out
/// before it, one due after its lease end after it, and an extended lease moves it to the new
/// end. PostgreSQL's claim leaves the row's due time in place (a HOT update) and orders it by
/// its lease end; this pins that order against the moved due time of the other stores.
pub async fn a_stranded_claim_takes_its_place_at_its_lease_end(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let one = ClaimRequest::new(1, LEASE).handler(c.clone(), 10);
    let t0 = now(&fx);
    let a = enqueue(&fx, msg("t.a")).await;
    let first = claim_one(&fx, &one).await;
    assert_eq!(first.message.id, a.message_id);
    // B falls due while A is leased; A's lease is then extended past C's due time.
    let b = enqueue(&fx, msg("t.b").delay(secs(10))).await;
    let c_msg = enqueue(&fx, msg("t.c").delay(secs(40))).await;
    let d = enqueue(&fx, msg("t.d").delay(secs(70))).await;
    fx.clock().advance(secs(20));
    let ext = fx
        .store()
        .extend(&first.lease, secs(40))
        .await
        .expect("extend");
    let a_due = t0.saturating_add(secs(60));
    assert_eq!(ext.until, a_due);
    let row = delivery(&fx, &Default::default(), first.delivery.id).await;
    assert_eq!(
        (row.status, row.next_attempt_at, row.lease_until),
        (DeliveryStatus::Processing, a_due, Some(a_due))
    );
    // At 80 s every row is due: B (10 s), C (40 s), A (its lease end, 60 s), D (70 s).
    fx.clock().advance(secs(60));
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!(stats.oldest_due_at, Some(t0.saturating_add(secs(10))));
    let two = ClaimRequest::new(2, LEASE).handler(c.clone(), 10);
    let first_two = claim(&fx, &two).await;
    assert_eq!(
        first_two.iter().map(|x| x.message.id).collect::<Vec<_>>(),
        vec![b.message_id, c_msg.message_id],
        "B and C come before the stranded A"
    );
    let next_two = claim(&fx, &two).await;
    assert_eq!(
        next_two.iter().map(|x| x.message.id).collect::<Vec<_>>(),
        vec![a.message_id, d.message_id],
        "then A at its lease end, then D (70 s)"
    );
    assert_eq!(
        (next_two[0].lease.attempts, next_two[1].lease.attempts),
        (2, 1)
    );
    assert_eq!(next_two[0].lease.claimed_from, DeliveryStatus::Processing);
    claim_none(&fx, &one).await;
}

/// A claim whose lease ended is claimable again, with a new token and one more attempt.
pub async fn stranded_claim_is_claimable_after_lease(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let first = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(first.lease.attempts, 1);
    claim_none(&fx, &for_consumer(&c)).await;
    fx.clock().advance(LEASE - secs(1));
    claim_none(&fx, &for_consumer(&c)).await;
    fx.clock().advance(secs(1));
    let second = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(second.delivery.id, first.delivery.id);
    assert_ne!(second.lease.token, first.lease.token);
    assert_eq!(second.lease.attempts, 2);
    assert_eq!(second.delivery.attempts, 2);
    assert_eq!(second.lease.claimed_from, DeliveryStatus::Processing);
    assert!(!second.lease.was_sending());
    assert_eq!(second.lease.until, now(&fx).saturating_add(LEASE));
    let lost = fx
        .store()
        .complete(
            &first.lease,
            &Completion {
                verdict: Verdict::Succeeded,
                attempt: None,
            },
        )
        .await;
    assert_kind(
        lost,
        ErrorKind::LeaseLost,
        "completion under the stranded lease",
    );
    complete_with(
        &fx,
        &second,
        Verdict::Succeeded,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;
    let d = delivery(&fx, &Default::default(), first.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Succeeded, 2));
}

/// `complete`, `release`, `extend` and `mark_sending` with a stale or unknown token fail
/// with `LeaseLost` and change nothing.
pub async fn stale_token_is_fenced(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let old = claim_one(&fx, &for_consumer(&c)).await;
    fx.clock().advance(LEASE + secs(1));
    let new = claim_one(&fx, &for_consumer(&c)).await;
    let before = delivery(&fx, &t, new.delivery.id).await;
    let forged = Lease {
        token: ClaimToken::generate(&OsEntropy),
        ..new.lease.clone()
    };
    for lease in [&old.lease, &forged] {
        let done = Completion {
            verdict: Verdict::Dead {
                reason: DeadReason::Permanent,
            },
            attempt: None,
        };
        assert_kind(
            fx.store().complete(lease, &done).await,
            ErrorKind::LeaseLost,
            "complete",
        );
        let r = fx
            .store()
            .release(std::slice::from_ref(lease), secs(0))
            .await
            .expect("release");
        assert_eq!((r.released, r.lost), (0, 1));
        assert_kind(
            fx.store().extend(lease, secs(600)).await,
            ErrorKind::LeaseLost,
            "extend",
        );
        assert_kind(
            fx.store().mark_sending(lease).await,
            ErrorKind::LeaseLost,
            "mark_sending",
        );
        let many = fx
            .store()
            .complete_many(&[(lease.clone(), done.clone())])
            .await
            .expect("complete_many");
        assert_eq!(many.len(), 1);
        assert_kind(
            many.into_iter().next().expect("one result"),
            ErrorKind::LeaseLost,
            "complete_many",
        );
    }
    assert_eq!(
        delivery(&fx, &t, new.delivery.id).await,
        before,
        "fenced calls changed the row"
    );
    assert!(fx
        .store()
        .attempts(&t, new.delivery.id)
        .await
        .expect("attempts")
        .is_empty());
    complete_with(
        &fx,
        &new,
        Verdict::Succeeded,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;
    let after = Completion {
        verdict: Verdict::Retry { at: now(&fx) },
        attempt: None,
    };
    assert_kind(
        fx.store().complete(&new.lease, &after).await,
        ErrorKind::LeaseLost,
        "complete twice",
    );
    assert_eq!(
        delivery(&fx, &t, new.delivery.id).await.status,
        DeliveryStatus::Succeeded
    );
}

/// A completion whose token still matches is accepted even after the lease ended, as long
/// as nobody claimed the delivery again.
pub async fn late_completion_with_matching_token_is_accepted(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let got = claim_one(&fx, &for_consumer(&c)).await;
    fx.clock().advance(LEASE + secs(10));
    complete_with(
        &fx,
        &got,
        Verdict::Succeeded,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!(d.status, DeliveryStatus::Succeeded);
    assert_eq!(d.completed_at, Some(now(&fx)));
    claim_none(&fx, &for_consumer(&c)).await;
}

/// `extend` moves the lease end to `now + by`; the delivery is not claimable meanwhile and
/// the lease still completes.
pub async fn extend_keeps_lease_alive(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t0 = now(&fx);
    let got = claim_one(&fx, &for_consumer(&c)).await;
    fx.clock().advance(secs(20));
    let ext = fx
        .store()
        .extend(&got.lease, secs(30))
        .await
        .expect("extend");
    assert_eq!(ext.until, t0.saturating_add(secs(50)));
    assert_eq!(ext.token, got.lease.token);
    assert_eq!(ext.delivery_id, got.lease.delivery_id);
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!(d.lease_until, Some(t0.saturating_add(secs(50))));
    assert_eq!(d.next_attempt_at, t0.saturating_add(secs(50)));
    assert_eq!(d.status, DeliveryStatus::Processing);
    fx.clock().advance(secs(20));
    claim_none(&fx, &for_consumer(&c)).await;
    fx.clock().advance(secs(15));
    let ext2 = fx
        .store()
        .extend(&ext, secs(60))
        .await
        .expect("extend after the lease ended");
    assert_eq!(ext2.until, now(&fx).saturating_add(secs(60)));
    claim_none(&fx, &for_consumer(&c)).await;
    complete_with(&fx, &got, Verdict::Succeeded, None).await;
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!((d.status, d.lease_until), (DeliveryStatus::Succeeded, None));
}

/// Released claims go back to `pending` with the attempt refunded, due after the delay;
/// releasing again counts as lost.
pub async fn release_refunds_and_delays(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("a.one")).await;
    enqueue(&fx, msg("a.two")).await;
    let t = Default::default();
    let got = claim(&fx, &for_consumer(&c)).await;
    assert_eq!(got.len(), 2);
    let leases: Vec<Lease> = got.iter().map(|c| c.lease.clone()).collect();
    let r = fx
        .store()
        .release(&leases, secs(10))
        .await
        .expect("release");
    assert_eq!((r.released, r.lost), (2, 0));
    for g in &got {
        let d = delivery(&fx, &t, g.delivery.id).await;
        assert_eq!(d.status, DeliveryStatus::Pending);
        assert_eq!(d.attempts, 0);
        assert_eq!(d.lease_until, None);
        assert_eq!(d.next_attempt_at, now(&fx).saturating_add(secs(10)));
    }
    let again = fx
        .store()
        .release(&leases, secs(0))
        .await
        .expect("release again");
    assert_eq!((again.released, again.lost), (0, 2));
    fx.clock().advance(secs(9));
    claim_none(&fx, &for_consumer(&c)).await;
    fx.clock().advance(secs(1));
    let back = claim(&fx, &for_consumer(&c)).await;
    assert_eq!(ids(&back), ids(&got));
    assert!(back
        .iter()
        .all(|b| b.lease.attempts == 1 && b.lease.claimed_from == DeliveryStatus::Pending));
    let (fresh, stale) = (&back[0].lease, &got[1].lease);
    let mixed = fx
        .store()
        .release(&[fresh.clone(), stale.clone()], secs(0))
        .await
        .expect("release a live and a stale lease");
    assert_eq!((mixed.released, mixed.lost), (1, 1));
    let empty = fx
        .store()
        .release(&[], secs(0))
        .await
        .expect("release nothing");
    assert_eq!((empty.released, empty.lost), (0, 0));
}

/// A delivery with an ordering key waits for older unfinished deliveries with the same
/// key to the same destination in the same tenant; other keys, destinations and tenants
/// do not block, and `dead` unblocks like `succeeded`.
pub async fn ordering_key_is_fifo_per_destination(fx: Fixture) {
    let c1 = add_consumer(&fx, "first", "*").await;
    let c2 = add_consumer(&fx, "second", "*").await;
    let m1 = enqueue(&fx, msg("order.created").ordering_key("k")).await;
    let m2 = enqueue(&fx, msg("order.updated").ordering_key("k")).await;
    let m3 = enqueue(&fx, msg("order.created").ordering_key("j")).await;
    let m4 = enqueue(&fx, msg("order.created")).await;
    let m5 = enqueue(&fx, msg("order.updated").ordering_key("k").tenant("other")).await;
    let msgs =
        |v: &[outboxkit_core::Claimed]| v.iter().map(|c| c.message.id).collect::<BTreeSet<_>>();
    let set = |v: &[outboxkit_core::MessageId]| v.iter().copied().collect::<BTreeSet<_>>();

    let a = claim(&fx, &for_consumer(&c1)).await;
    assert_eq!(
        msgs(&a),
        set(&[m1.message_id, m3.message_id, m4.message_id, m5.message_id])
    );
    let b = claim(&fx, &for_consumer(&c2)).await;
    assert_eq!(
        msgs(&b),
        set(&[m1.message_id, m3.message_id, m4.message_id, m5.message_id])
    );
    claim_none(&fx, &for_consumer(&c1)).await;

    let c1_m1 = a
        .iter()
        .find(|c| c.message.id == m1.message_id)
        .expect("m1 for the first consumer");
    complete_with(&fx, c1_m1, Verdict::Succeeded, None).await;
    let next = claim_one(&fx, &for_consumer(&c1)).await;
    assert_eq!(
        next.message.id, m2.message_id,
        "the next in line after success"
    );

    let c2_m1 = b
        .iter()
        .find(|c| c.message.id == m1.message_id)
        .expect("m1 for the second consumer");
    complete_with(&fx, c2_m1, Verdict::Retry { at: now(&fx) }, None).await;
    let retried = claim_one(&fx, &for_consumer(&c2)).await;
    assert_eq!(
        retried.message.id, m1.message_id,
        "a retried head keeps its place"
    );
    complete_with(
        &fx,
        &retried,
        Verdict::Dead {
            reason: DeadReason::Permanent,
        },
        None,
    )
    .await;
    let after_dead = claim_one(&fx, &for_consumer(&c2)).await;
    assert_eq!(
        after_dead.message.id, m2.message_id,
        "a dead head no longer blocks"
    );
}

/// Older unfinished deliveries of a dormant topic do not block newer ones with the same
/// key.
pub async fn dormant_topic_does_not_block(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    // The abandoned producer's row is not due for a long while, so it is never claimed here.
    enqueue(
        &fx,
        msg("legacy.event").ordering_key("k").delay(secs(86_400)),
    )
    .await;
    let fresh = enqueue(&fx, msg("order.created").ordering_key("k")).await;
    let legacy = [topic("legacy.event")];
    claim_none(&fx, &for_consumer(&c)).await;
    let dormant = for_consumer(&c).dormant_topics(legacy.clone());
    let got = claim_one(&fx, &dormant).await;
    assert_eq!(got.message.id, fresh.message_id);
    let left = list_all(
        &fx,
        &Default::default(),
        &DeliveryFilter {
            status: Some(DeliveryStatus::Pending),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(left.len(), 1);
    assert_eq!(
        left[0].topic,
        topic("legacy.event"),
        "the dormant row is left alone"
    );
}
