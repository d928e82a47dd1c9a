//! Cancel (`OperatorStore::cancel`, `cancel_message`): a waiting delivery, or every waiting
//! delivery of a message, becomes finished `dead` (`cancelled`) before it is sent.

use outboxkit_core::{
    CancelReport, DeadReason, DeliveryStatus, ErrorKind, HandlerOutcome, MessageId, OsEntropy,
    Outcome, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Assert that `r` is a `Conflict` whose message contains `says`.
fn assert_conflict<T: std::fmt::Debug>(r: outboxkit_core::Result<T>, says: &str, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected a conflict, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Conflict, "{what}: wrong kind ({e})");
            assert!(e.to_string().contains(says), "{what}: says {e}");
        }
    }
}

/// A `pending` delivery (one failed attempt behind it) becomes finished `dead` with reason
/// `cancelled`: its attempts and ledger are kept, no attempt is spent, it is never claimed
/// again, and the counts see it as dead.
pub async fn cancel_pending_makes_it_dead(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let got = claim_one(&fx, &for_consumer(&c)).await;
    settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Retry),
        &handler_policy(8),
    )
    .await;
    let id = got.delivery.id;
    assert_eq!(delivery(&fx, &t, id).await.status, DeliveryStatus::Pending);
    fx.clock().advance(secs(5));
    fx.store().cancel(&t, id).await.expect("cancel pending");
    let d = delivery(&fx, &t, id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts),
        (DeliveryStatus::Dead, Some(DeadReason::Cancelled), 1)
    );
    assert_eq!(d.completed_at, Some(now(&fx)));
    assert_eq!(d.lease_until, None);
    assert_eq!(
        fx.store().attempts(&t, id).await.expect("attempts").len(),
        1
    );
    fx.clock().advance(secs(3600));
    claim_none(&fx, &for_consumer(&c)).await;
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!((stats.pending, stats.dead), (0, 1));
    let queue = fx.store().queue_stats().await.expect("queue_stats");
    assert_eq!((queue.pending, queue.dead), (0, 0));
    assert_conflict(
        fx.store().cancel(&t, id).await,
        "already finished",
        "cancel twice",
    );
}

/// A `held` delivery (a 401 behind it) is cancelled the same way; its probe never comes.
pub async fn cancel_held_makes_it_dead(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let got = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &got, http(401), &webhook_policy()).await;
    let id = got.delivery.id;
    assert_eq!(delivery(&fx, &t, id).await.status, DeliveryStatus::Held);
    fx.store().cancel(&t, id).await.expect("cancel held");
    let d = delivery(&fx, &t, id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts),
        (DeliveryStatus::Dead, Some(DeadReason::Cancelled), 1)
    );
    assert_eq!(
        fx.store().attempts(&t, id).await.expect("attempts").len(),
        1
    );
    fx.clock().advance(secs(2 * 3600));
    claim_none(&fx, &for_webhooks()).await;
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!((stats.held, stats.dead), (0, 1));
}

/// An in-flight delivery (`processing`, `sending`) may already be sent: cancelling it is a
/// `Conflict` that changes nothing, and its lease still completes.
pub async fn cancel_in_flight_is_a_conflict(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created").email("someone@example.com")).await;
    let t = Default::default();
    let got = claim_one(&fx, &for_consumer(&c)).await;
    let before = delivery(&fx, &t, got.delivery.id).await;
    assert_conflict(
        fx.store().cancel(&t, got.delivery.id).await,
        "in flight",
        "cancel processing",
    );
    assert_eq!(delivery(&fx, &t, got.delivery.id).await, before);
    complete_with(&fx, &got, Verdict::Succeeded, None).await;

    let mail = claim_one(&fx, &for_email()).await;
    fx.store()
        .mark_sending(&mail.lease)
        .await
        .expect("mark_sending");
    let before = delivery(&fx, &t, mail.delivery.id).await;
    assert_eq!(before.status, DeliveryStatus::Sending);
    assert_conflict(
        fx.store().cancel(&t, mail.delivery.id).await,
        "in flight",
        "cancel sending",
    );
    assert_eq!(delivery(&fx, &t, mail.delivery.id).await, before);
    complete_with(&fx, &mail, Verdict::Succeeded, None).await;
}

/// A finished delivery (`succeeded`, `dead`) has nothing left to cancel: a `Conflict` that
/// says so and changes nothing.
pub async fn cancel_finished_is_a_conflict(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    enqueue(&fx, msg("order.updated")).await;
    let t = Default::default();
    let got = claim(&fx, &for_consumer(&c)).await;
    assert_eq!(got.len(), 2);
    let policy = handler_policy(8);
    settle(&fx, &got[0], Outcome::Handler(HandlerOutcome::Ok), &policy).await;
    settle(
        &fx,
        &got[1],
        Outcome::Handler(HandlerOutcome::Discard),
        &policy,
    )
    .await;
    for (g, what) in got.iter().zip(["cancel succeeded", "cancel dead"]) {
        let before = delivery(&fx, &t, g.delivery.id).await;
        assert!(before.status.is_finished());
        assert_conflict(
            fx.store().cancel(&t, g.delivery.id).await,
            "already finished",
            what,
        );
        assert_eq!(delivery(&fx, &t, g.delivery.id).await, before);
    }
}

/// Another tenant's delivery or message, and an unknown id, are `NotFound`, and nothing
/// changes; the owner can cancel. A message without deliveries cancels nothing.
pub async fn cancel_across_tenants_is_not_found(fx: Fixture) {
    let empty = enqueue(&fx, msg("nobody.listens").tenant("alpha")).await;
    assert_eq!(empty.deliveries, 0);
    assert_eq!(
        fx.store()
            .cancel_message(&tenant("alpha"), empty.message_id)
            .await
            .expect("cancel_message without deliveries"),
        CancelReport::default()
    );
    add_consumer(&fx, "worker", "*").await;
    let e = enqueue(&fx, msg("order.created").tenant("alpha")).await;
    let (alpha, beta) = (tenant("alpha"), tenant("beta"));
    let d = only_delivery(&fx, &alpha).await;
    assert_kind(
        fx.store().cancel(&beta, d.id).await,
        ErrorKind::NotFound,
        "cancel as another tenant",
    );
    assert_kind(
        fx.store().cancel_message(&beta, e.message_id).await,
        ErrorKind::NotFound,
        "cancel_message as another tenant",
    );
    assert_eq!(delivery(&fx, &alpha, d.id).await, d);
    let unknown = outboxkit_core::DeliveryId::generate(now(&fx), &OsEntropy);
    assert_kind(
        fx.store().cancel(&alpha, unknown).await,
        ErrorKind::NotFound,
        "cancel unknown",
    );
    assert_kind(
        fx.store()
            .cancel_message(&alpha, MessageId::generate(now(&fx), &OsEntropy))
            .await,
        ErrorKind::NotFound,
        "cancel_message unknown",
    );
    fx.store()
        .cancel(&alpha, d.id)
        .await
        .expect("cancel as the owner");
    assert_eq!(
        delivery(&fx, &alpha, d.id).await.dead_reason,
        Some(DeadReason::Cancelled)
    );
}

/// `cancel_message` cancels every waiting delivery of the message (pending, held) at once
/// and counts the in-flight and finished ones as skipped, touching nothing else; a retry
/// cancels nothing more.
pub async fn cancel_message_cancels_what_waits(fx: Fixture) {
    let busy = add_consumer(&fx, "busy", "*").await;
    let done = add_consumer(&fx, "done", "*").await;
    let idle = add_consumer(&fx, "idle", "*").await;
    add_endpoint(&fx, "default", "*").await;
    let m = enqueue(&fx, msg("order.created")).await;
    let other = enqueue(&fx, msg("order.created")).await;
    assert_eq!(m.deliveries, 4);
    let t = Default::default();
    let in_flight = claim(&fx, &for_consumer(&busy)).await;
    assert_eq!(in_flight.len(), 2);
    let mine = in_flight
        .iter()
        .find(|c| c.message.id == m.message_id)
        .expect("the message's busy delivery");
    for c in claim(&fx, &for_consumer(&done)).await {
        complete_with(&fx, &c, Verdict::Succeeded, None).await;
    }
    for hook in claim(&fx, &for_webhooks()).await {
        settle(&fx, &hook, http(401), &webhook_policy()).await;
    }
    let report = fx
        .store()
        .cancel_message(&t, m.message_id)
        .await
        .expect("cancel_message");
    assert_eq!(
        report,
        CancelReport {
            cancelled: 2,
            skipped: 2
        }
    );
    let all = list_all(&fx, &t, &Default::default()).await;
    for d in &all {
        let cancelled = d.dead_reason == Some(DeadReason::Cancelled);
        let waited = d.destination.endpoint().is_some()
            || d.destination == outboxkit_core::Destination::Handler(idle.clone());
        let expect = d.message_id == m.message_id && waited;
        assert_eq!(cancelled, expect, "delivery {} ({:?})", d.id, d.destination);
    }
    assert!(all
        .iter()
        .filter(|d| d.message_id == other.message_id)
        .all(|d| d.status != DeliveryStatus::Dead));
    let again = fx
        .store()
        .cancel_message(&t, m.message_id)
        .await
        .expect("cancel_message again");
    assert_eq!(
        again,
        CancelReport {
            cancelled: 0,
            skipped: 4
        }
    );
    complete_with(&fx, mine, Verdict::Succeeded, None).await;
}

/// A cancelled delivery is finished: it no longer holds back the later deliveries of its
/// ordering key.
pub async fn cancel_releases_the_key_barrier(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let first = enqueue(&fx, msg("order.created").ordering_key("k").delay(secs(600))).await;
    let second = enqueue(&fx, msg("order.updated").ordering_key("k")).await;
    let t = Default::default();
    claim_none(&fx, &for_consumer(&c)).await;
    let report = fx
        .store()
        .cancel_message(&t, first.message_id)
        .await
        .expect("cancel the first");
    assert_eq!(report.cancelled, 1);
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(got.message.id, second.message_id);
}

/// A cancelled delivery is dead, so `replay` sends it again: pending, due now, a fresh
/// budget and a new run; its earlier attempts stay in the ledger.
pub async fn replay_after_cancel_sends_again(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created").delay(secs(600))).await;
    let t = Default::default();
    let d = only_delivery(&fx, &t).await;
    fx.store().cancel(&t, d.id).await.expect("cancel");
    let cancelled = delivery(&fx, &t, d.id).await;
    fx.clock().advance(secs(5));
    fx.store().replay(&t, d.id).await.expect("replay cancelled");
    let back = delivery(&fx, &t, d.id).await;
    assert_eq!(
        (back.status, back.dead_reason, back.attempts),
        (DeliveryStatus::Pending, None, 0)
    );
    assert_eq!(back.next_attempt_at, now(&fx));
    assert_eq!(back.run, cancelled.run + 1);
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(got.delivery.id, d.id);
    complete_with(&fx, &got, Verdict::Succeeded, None).await;
    assert_eq!(
        delivery(&fx, &t, d.id).await.status,
        DeliveryStatus::Succeeded
    );
}
