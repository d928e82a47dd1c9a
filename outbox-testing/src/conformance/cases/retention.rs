//! Retention (purge with tenant rotation) and stats.

use outboxkit_core::{
    DeadReason, Delivery, DeliveryFilter, DeliveryStatus, ErrorKind, HandlerOutcome, Outcome,
    Stats, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

async fn finish(fx: &Fixture, c: &outboxkit_core::ConsumerName, verdict: Verdict) -> Delivery {
    let got = claim_one(fx, &for_consumer(c)).await;
    complete_with(
        fx,
        &got,
        verdict,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;
    delivery(fx, &got.delivery.tenant, got.delivery.id).await
}

/// Claim and succeed every delivery of `c`, then let a minute pass: the instant before it is
/// a cutoff that purges them all.
async fn succeed_all(fx: &Fixture, c: &outboxkit_core::ConsumerName) -> outboxkit_core::Timestamp {
    for got in claim(fx, &for_consumer(c)).await {
        complete_with(fx, &got, Verdict::Succeeded, None).await;
    }
    fx.clock().advance(secs(60));
    now(fx)
}

/// Retention removes only `succeeded`/`dead` deliveries completed before the cutoff (with
/// their attempts), and messages created before it that have no deliveries left.
pub async fn purge_removes_only_finished_before_cutoff(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    let t = outboxkit_core::TenantId::default();
    let empty = enqueue(&fx, msg("nothing.matches")).await;
    let m_ok = enqueue(&fx, msg("order.created")).await;
    let ok = finish(&fx, &c, Verdict::Succeeded).await;
    let m_dead = enqueue(&fx, msg("order.created")).await;
    let dead = finish(
        &fx,
        &c,
        Verdict::Dead {
            reason: DeadReason::Permanent,
        },
    )
    .await;
    let m_late = enqueue(&fx, msg("order.created")).await;
    let m_pending = enqueue(&fx, msg("order.created").delay(secs(86_400))).await;
    fx.clock().advance(secs(3600));
    let cutoff = now(&fx);
    fx.clock().advance(secs(3600));
    let late = finish(&fx, &c, Verdict::Succeeded).await;
    assert_eq!(late.message_id, m_late.message_id);
    let young = enqueue(&fx, msg("nothing.matches")).await;

    let r = fx
        .store()
        .purge_completed(cutoff, 100)
        .await
        .expect("purge");
    assert_eq!(
        (r.deliveries, r.messages, r.tenant.clone()),
        (2, 3, Some(t.clone()))
    );
    for id in [ok.id, dead.id] {
        assert_kind(
            fx.store().get_delivery(&t, id).await,
            ErrorKind::NotFound,
            "purged delivery",
        );
        assert_kind(
            fx.store().attempts(&t, id).await,
            ErrorKind::NotFound,
            "purged attempts",
        );
    }
    for m in [empty.message_id, m_ok.message_id, m_dead.message_id] {
        assert_kind(
            fx.store().get_message(&t, m).await,
            ErrorKind::NotFound,
            "purged message",
        );
    }
    for m in [m_late.message_id, m_pending.message_id, young.message_id] {
        fx.store().get_message(&t, m).await.expect("a kept message");
    }
    assert_eq!(
        delivery(&fx, &t, late.id).await.status,
        DeliveryStatus::Succeeded
    );
    assert_eq!(
        fx.store()
            .attempts(&t, late.id)
            .await
            .expect("attempts")
            .len(),
        1
    );
    assert_eq!(list_all(&fx, &t, &DeliveryFilter::default()).await.len(), 2);
    let again = fx
        .store()
        .purge_completed(cutoff, 100)
        .await
        .expect("purge again");
    assert_eq!(
        (again.deliveries, again.messages, again.tenant),
        (0, 0, None)
    );
    assert_kind(
        fx.store().purge_completed(cutoff, 0).await,
        ErrorKind::InvalidInput,
        "limit 0",
    );
}

/// A message stays while any of its deliveries does (in the queue or in the history), and
/// goes in the call that purges its last one: two consumers, so each message has two
/// deliveries finishing at different times.
pub async fn purge_keeps_a_message_until_its_last_delivery_goes(fx: Fixture) {
    // The oldest of the consumer's deliveries, succeeded.
    let finish = |c: &outboxkit_core::ConsumerName| {
        let req = outboxkit_core::ClaimRequest::new(1, LEASE).handler(c.clone(), 10);
        let fx = &fx;
        async move {
            let got = claim_one(fx, &req).await;
            complete_with(fx, &got, Verdict::Succeeded, None).await;
            got.delivery
        }
    };
    let worker = add_consumer(&fx, "worker", "*").await;
    let audit = add_consumer(&fx, "audit", "*").await;
    let t = outboxkit_core::TenantId::default();
    let m1 = enqueue(&fx, msg("order.created")).await.message_id;
    let m2 = enqueue(&fx, msg("order.created")).await.message_id;
    let w1 = finish(&worker).await;
    let w2 = finish(&worker).await;
    assert_eq!((w1.message_id, w2.message_id), (m1, m2));
    fx.clock().advance(secs(60));
    let first = now(&fx);
    fx.clock().advance(secs(60));
    let a1 = finish(&audit).await;
    assert_eq!(a1.message_id, m1);
    fx.clock().advance(secs(60));
    let second = now(&fx);
    fx.clock().advance(secs(60));

    let r = fx.store().purge_completed(first, 100).await.expect("purge");
    assert_eq!(
        (r.deliveries, r.messages),
        (2, 0),
        "both messages keep a delivery: m1's in the history, m2's in the queue"
    );
    for m in [m1, m2] {
        fx.store().get_message(&t, m).await.expect("a kept message");
    }
    let r = fx
        .store()
        .purge_completed(second, 100)
        .await
        .expect("purge");
    assert_eq!((r.deliveries, r.messages), (1, 1), "m1 goes with its last");
    assert_kind(
        fx.store().get_message(&t, m1).await,
        ErrorKind::NotFound,
        "m1 after its last delivery",
    );
    fx.store().get_message(&t, m2).await.expect("m2 is pending");

    let a2 = finish(&audit).await;
    assert_eq!(a2.message_id, m2);
    fx.clock().advance(secs(60));
    let r = fx
        .store()
        .purge_completed(now(&fx), 100)
        .await
        .expect("purge");
    assert_eq!((r.deliveries, r.messages), (1, 1));
    assert_kind(
        fx.store().get_message(&t, m2).await,
        ErrorKind::NotFound,
        "m2 after its last delivery",
    );
    assert_eq!(fx.store().stats().await.expect("stats").total(), 0);
}

/// The rotation serves a tenant whose only expired rows are messages that never had a
/// delivery, between (and after) tenants with finished deliveries, and ends with nothing.
pub async fn purge_rotation_serves_a_tenant_with_only_messages(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    for name in ["t-a", "t-c"] {
        enqueue(&fx, msg("order.created").tenant(name)).await;
    }
    for name in ["t-b", "t-d"] {
        enqueue(&fx, msg("nothing.matches").tenant(name)).await;
    }
    let cutoff = succeed_all(&fx, &c).await;
    let mut visits = Vec::new();
    for _ in 0..4 {
        let r = fx.store().purge_completed(cutoff, 10).await.expect("purge");
        let tenant = r.tenant.expect("a tenant with work");
        visits.push((tenant.as_str().to_owned(), r.deliveries, r.messages));
    }
    let want = [("t-a", 1, 1), ("t-b", 0, 1), ("t-c", 1, 1), ("t-d", 0, 1)];
    assert_eq!(visits, want.map(|(t, d, m)| (t.to_owned(), d, m)).to_vec());
    let done = fx.store().purge_completed(cutoff, 10).await.expect("purge");
    assert_eq!((done.tenant, done.deliveries, done.messages), (None, 0, 0));
}

/// Each purge call serves one tenant, taking them in turn, at most `limit` rows each.
pub async fn purge_rotates_over_tenants(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    for (name, n) in [("t-a", 5), ("t-b", 1), ("t-c", 1)] {
        for _ in 0..n {
            enqueue(&fx, msg("order.created").tenant(name)).await;
        }
    }
    let cutoff = succeed_all(&fx, &c).await;
    let mut visits = Vec::new();
    for _ in 0..5 {
        let r = fx.store().purge_completed(cutoff, 2).await.expect("purge");
        assert_eq!(
            r.messages, r.deliveries,
            "each message loses its only delivery"
        );
        visits.push((
            r.tenant.expect("a tenant with work").as_str().to_owned(),
            r.deliveries,
        ));
    }
    let want = [("t-a", 2), ("t-b", 1), ("t-c", 1), ("t-a", 2), ("t-a", 1)];
    assert_eq!(visits, want.map(|(t, n)| (t.to_owned(), n)).to_vec());
    let done = fx.store().purge_completed(cutoff, 2).await.expect("purge");
    assert_eq!((done.tenant, done.deliveries, done.messages), (None, 0, 0));
    assert_eq!(fx.store().stats().await.expect("stats").total(), 0);
}

/// A deleted consumer's deliveries stay (and can still be claimed for it), so a due one still
/// counts in the store's oldest due time.
pub async fn stats_oldest_due_counts_a_deleted_consumers_deliveries(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let t0 = now(&fx);
    enqueue(&fx, msg("order.created")).await;
    fx.clock().advance(secs(10));
    fx.store()
        .delete_consumer(&c)
        .await
        .expect("delete_consumer");
    let s = fx.store().stats().await.expect("stats");
    assert_eq!((s.pending, s.total()), (1, 1));
    assert_eq!(s.oldest_due_at, Some(t0));
    assert_eq!(s.oldest_due_age, Some(secs(10)));
}

/// Stats count deliveries per status over every tenant, and the oldest due delivery.
pub async fn stats_counts_and_oldest_due_age(fx: Fixture) {
    assert_eq!(fx.store().stats().await.expect("stats"), Stats::default());
    let c = add_consumer(&fx, "worker", "*").await;
    let t0 = now(&fx);
    for name in ["alpha", "beta", "gamma", "delta"] {
        enqueue(&fx, msg("order.created").tenant(name)).await;
    }
    enqueue(&fx, msg("order.created").delay(secs(3600))).await;
    fx.clock().advance(secs(10));
    let s = fx.store().stats().await.expect("stats");
    assert_eq!((s.pending, s.total()), (5, 5));
    assert_eq!(s.oldest_due_at, Some(t0));
    assert_eq!(s.oldest_due_age, Some(secs(10)));
    let one = |n| outboxkit_core::ClaimRequest::new(n, LEASE).handler(c.clone(), 10);
    let got = claim(&fx, &one(3)).await;
    assert_eq!(got.len(), 3);
    complete_with(&fx, &got[0], Verdict::Succeeded, None).await;
    complete_with(
        &fx,
        &got[1],
        Verdict::Dead {
            reason: DeadReason::Permanent,
        },
        None,
    )
    .await;
    fx.store()
        .mark_sending(&got[2].lease)
        .await
        .expect("mark_sending");
    let _processing = claim_one(&fx, &one(1)).await;
    let s = fx.store().stats().await.expect("stats");
    let counts = (
        s.pending,
        s.processing,
        s.sending,
        s.succeeded,
        s.held,
        s.dead,
    );
    assert_eq!(counts, (1, 1, 1, 1, 0, 1));
    assert_eq!(
        (s.oldest_due_at, s.oldest_due_age),
        (None, None),
        "the delayed one is not due yet"
    );
    fx.clock().advance(secs(3600));
    let s = fx.store().stats().await.expect("stats");
    assert_eq!(
        s.oldest_due_at,
        Some(t0.saturating_add(LEASE + secs(10))),
        "expired leases are due"
    );
    assert_eq!(s.oldest_due_age, Some(secs(3600) - LEASE));
    assert_eq!(s.count(DeliveryStatus::Sending), 1);
}

/// `queue_stats` is `stats` without the finished counts, at every step: empty, with work of
/// every unfinished status, after completions and after a purge of the finished history.
pub async fn queue_stats_are_the_unfinished_part_of_stats(fx: Fixture) {
    async fn same(fx: &Fixture) -> Stats {
        let all = fx.store().stats().await.expect("stats");
        let queue = fx.store().queue_stats().await.expect("queue_stats");
        assert_eq!(queue, all.clone().unfinished());
        assert_eq!((queue.succeeded, queue.dead), (0, 0));
        all
    }
    same(&fx).await;
    let c = add_consumer(&fx, "worker", "*").await;
    add_endpoint_with(&fx, "acme", "*", outboxkit_core::EndpointStatus::Paused).await;
    for _ in 0..4 {
        enqueue(&fx, msg("order.created").tenant("acme")).await;
    }
    enqueue(&fx, msg("order.created").delay(secs(60))).await;
    fx.clock().advance(secs(5));
    let one = |n| outboxkit_core::ClaimRequest::new(n, LEASE).handler(c.clone(), 10);
    let got = claim(&fx, &one(3)).await;
    assert_eq!(got.len(), 3);
    complete_with(&fx, &got[0], Verdict::Succeeded, None).await;
    complete_with(
        &fx,
        &got[1],
        Verdict::Dead {
            reason: DeadReason::Permanent,
        },
        None,
    )
    .await;
    fx.store()
        .mark_sending(&got[2].lease)
        .await
        .expect("mark_sending");
    let s = same(&fx).await;
    assert_eq!(
        (
            s.pending,
            s.processing,
            s.sending,
            s.held,
            s.succeeded,
            s.dead
        ),
        (2, 0, 1, 4, 1, 1),
        "one due and one delayed still pending"
    );
    let _processing = claim_one(&fx, &one(1)).await;
    fx.clock().advance(secs(60));
    let s = same(&fx).await;
    assert_eq!((s.pending, s.processing), (1, 1));
    assert!(s.oldest_due_at.is_some());
    fx.store()
        .purge_completed(now(&fx), 100)
        .await
        .expect("purge_completed");
    let s = same(&fx).await;
    assert_eq!(
        (s.succeeded, s.dead),
        (0, 0),
        "the finished ones were purged"
    );
}
