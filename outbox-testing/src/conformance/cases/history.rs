//! The richer ledger: runs, scheduled times and payload fingerprints of attempts, filters by
//! ordering key and text, and the endpoint's last delivery status.

use outboxkit_core::{
    AttemptOutcome, Completion, DeadReason, DeliveryFilter, ErrorClass, ErrorKind, HandlerOutcome,
    LastDelivery, OrderingKey, Outcome, PayloadFingerprint, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Complete a claim with `verdict` and a ledger record carrying `excerpt`.
async fn complete_noting(
    fx: &Fixture,
    got: &outboxkit_core::Claimed,
    verdict: Verdict,
    outcome: Outcome,
    excerpt: &str,
) {
    let t = now(fx);
    let attempt = record(&outcome, t, t, Some(excerpt));
    fx.store()
        .complete(&got.lease, &Completion { verdict, attempt })
        .await
        .expect("complete");
}

/// Every attempt records when it was due and the payload's size and SHA-256.
pub async fn ledger_records_schedule_and_payload(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    let t0 = now(&fx);
    let m = enqueue(&fx, msg("order.created").delay(secs(60))).await;
    fx.clock().advance(secs(90));
    let first = claim_one(&fx, &for_consumer(&c)).await;
    let retry_at = now(&fx).saturating_add(secs(300));
    complete_with(
        &fx,
        &first,
        Verdict::Retry { at: retry_at },
        Some(Outcome::Handler(HandlerOutcome::Retry)),
    )
    .await;
    fx.clock().advance(secs(400));
    let second = claim_one(&fx, &for_consumer(&c)).await;
    complete_with(
        &fx,
        &second,
        Verdict::Succeeded,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;

    let t = first.delivery.tenant.clone();
    let message = fx
        .store()
        .get_message(&t, m.message_id)
        .await
        .expect("get_message");
    let want = PayloadFingerprint::of(&message.payload);
    assert_eq!(want.size, message.payload.len() as u64);
    let attempts = fx
        .store()
        .attempts(&t, first.delivery.id)
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        attempts.iter().map(|a| a.scheduled_at).collect::<Vec<_>>(),
        vec![Some(t0.saturating_add(secs(60))), Some(retry_at)],
        "each attempt records when it was due, not when it was claimed"
    );
    for a in &attempts {
        assert_eq!(a.payload, want);
        assert_eq!(a.run, 1);
    }
}

/// `replay` starts a new numbered run: the first run's attempts stay readable, the new
/// attempts carry the next run number, and numbering continues.
pub async fn replay_starts_a_new_run(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    enqueue(&fx, msg("order.created")).await;
    let first = claim_one(&fx, &for_consumer(&c)).await;
    let t = first.delivery.tenant.clone();
    let id = first.delivery.id;
    assert_eq!(first.delivery.run, 1);
    complete_noting(
        &fx,
        &first,
        Verdict::Dead {
            reason: DeadReason::Permanent,
        },
        Outcome::Handler(HandlerOutcome::Discard),
        "first run",
    )
    .await;
    fx.clock().advance(secs(60));
    fx.store().replay(&t, id).await.expect("replay");
    let replayed = delivery(&fx, &t, id).await;
    assert_eq!((replayed.run, replayed.attempts), (2, 0));
    let kept = fx.store().attempts(&t, id).await.expect("attempts");
    assert_eq!(kept.len(), 1, "the first run's attempts stay");

    let second = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(second.lease.attempts, 1, "the new run has a fresh budget");
    complete_noting(
        &fx,
        &second,
        Verdict::Succeeded,
        Outcome::Handler(HandlerOutcome::Ok),
        "second run",
    )
    .await;
    let attempts = fx.store().attempts(&t, id).await.expect("attempts");
    let runs: Vec<(u32, u32, Option<&str>)> = attempts
        .iter()
        .map(|a| (a.number, a.run, a.record.excerpt.as_deref()))
        .collect();
    assert_eq!(
        runs,
        vec![(1, 1, Some("first run")), (2, 2, Some("second run"))]
    );
    assert_eq!(delivery(&fx, &t, id).await.run, 2);
}

/// Listings filter by ordering key and by text over every stored excerpt (any attempt's),
/// ignoring ASCII case; a bad text filter is `InvalidInput`.
pub async fn ledger_filters_by_ordering_key_and_text(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    let t = outboxkit_core::TenantId::default();
    enqueue(&fx, msg("order.created").ordering_key("order:1")).await;
    enqueue(&fx, msg("order.created").ordering_key("order:2")).await;
    enqueue(&fx, msg("order.paid").ordering_key("order:1")).await;
    enqueue(&fx, msg("order.created")).await;
    let key = |k: &str| DeliveryFilter {
        ordering_key: Some(OrderingKey::new(k).expect("key")),
        ..Default::default()
    };
    assert_eq!(list_all(&fx, &t, &key("order:1")).await.len(), 2);
    assert_eq!(list_all(&fx, &t, &key("order:2")).await.len(), 1);
    assert_eq!(list_all(&fx, &t, &key("order:3")).await.len(), 0);

    // order:1 blocks its second message; take the three heads.
    let got = claim(&fx, &for_consumer(&c)).await;
    assert_eq!(got.len(), 3);
    let retry = |s| Verdict::Retry {
        at: now(&fx).saturating_add(secs(s)),
    };
    let fail = || Outcome::Handler(HandlerOutcome::Retry);
    complete_noting(&fx, &got[0], retry(10), fail(), "Billing upstream TIMEOUT").await;
    complete_noting(&fx, &got[1], retry(10), fail(), "connection refused").await;
    complete_noting(
        &fx,
        &got[2],
        Verdict::Succeeded,
        Outcome::Handler(HandlerOutcome::Ok),
        "ok",
    )
    .await;
    // The first one's next attempt overwrites its last outcome; the text stays findable.
    fx.clock().advance(secs(20));
    let again = claim(&fx, &for_consumer(&c)).await;
    let first_again = again
        .iter()
        .find(|g| g.delivery.id == got[0].delivery.id)
        .expect("the first delivery again");
    complete_noting(&fx, first_again, retry(10), fail(), "still failing").await;

    let text = |s: &str| DeliveryFilter {
        text: Some(s.to_owned()),
        ..Default::default()
    };
    let found = list_all(&fx, &t, &text("timeout")).await;
    assert_eq!(
        found.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![got[0].delivery.id],
        "an earlier attempt's excerpt matches, ignoring case"
    );
    assert_eq!(list_all(&fx, &t, &text("REFUSED")).await.len(), 1);
    assert_eq!(list_all(&fx, &t, &text("nowhere")).await.len(), 0);
    let both = DeliveryFilter {
        text: Some("fail".to_owned()),
        ..key("order:1")
    };
    assert_eq!(list_all(&fx, &t, &both).await.len(), 1);
    let mismatch = DeliveryFilter {
        text: Some("refused".to_owned()),
        ..key("order:1")
    };
    assert_eq!(list_all(&fx, &t, &mismatch).await.len(), 0);
    for bad in [String::new(), "x".repeat(201)] {
        assert_kind(
            fx.store()
                .list_deliveries(&t, &text(&bad), outboxkit_core::PageRequest::first(10))
                .await,
            ErrorKind::InvalidInput,
            "a bad text filter",
        );
    }
}

/// Completing a webhook delivery records the outcome and time on its endpoint, in the same
/// step; other endpoints and handler deliveries leave endpoints alone.
pub async fn endpoint_shows_last_delivery(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let other = add_endpoint(&fx, "acme", "user.*").await;
    let acme = tenant("acme");
    let stored = fx.store().get_endpoint(&acme, e.id).await.expect("get");
    assert_eq!(stored.last_delivery, None, "nothing delivered yet");
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let policy = webhook_policy();

    let got = claim_one(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(2));
    let failed_at = now(&fx);
    settle(&fx, &got, http(503), &policy).await;
    let seen = fx.store().get_endpoint(&acme, e.id).await.expect("get");
    assert_eq!(
        seen.last_delivery,
        Some(LastDelivery {
            outcome: AttemptOutcome::Failed(ErrorClass::Response5xx),
            status_code: Some(503),
            at: failed_at,
        })
    );

    fx.clock().advance(secs(3600));
    let got = claim_one(&fx, &for_webhooks()).await;
    let ok_at = now(&fx);
    settle(&fx, &got, http(204), &policy).await;
    let list = fx.store().list_endpoints(&acme).await.expect("list");
    let listed = list.iter().find(|x| x.id == e.id).expect("listed");
    assert_eq!(
        listed.last_delivery,
        Some(LastDelivery {
            outcome: AttemptOutcome::Succeeded,
            status_code: Some(204),
            at: ok_at,
        })
    );
    let untouched = list.iter().find(|x| x.id == other.id).expect("listed");
    assert_eq!(untouched.last_delivery, None);
}
