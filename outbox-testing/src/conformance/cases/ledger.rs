//! The ledger (attempts, listings, filters), e-mail sends and batch completion.

use outboxkit_core::{
    AttemptOutcome, AttemptRecord, Claimed, Completion, DeadReason, Delivery, DeliveryFilter,
    DeliveryStatus, DestinationKind, ErrorClass, ErrorKind, HandlerOutcome, Lease, OsEntropy,
    Outcome, PageRequest, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Attempts are appended in order with their times, outcome, status code and a bounded
/// excerpt; the delivery's last outcome follows the latest one.
pub async fn ledger_records_attempts(fx: Fixture) {
    add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let acme = tenant("acme");
    let policy = webhook_policy();
    let long = format!("upstream exploded: {}", "é".repeat(400));
    let plan = [
        (http(503), Some(long.as_str())),
        (Outcome::Transport(ErrorClass::Timeout), None),
        (http(200), Some("ok")),
    ];
    let mut starts = Vec::new();
    let mut id = None;
    for (outcome, text) in &plan {
        let got = claim_one(&fx, &for_webhooks()).await;
        id = Some(got.delivery.id);
        let started = now(&fx);
        starts.push(started);
        fx.clock().advance(std::time::Duration::from_millis(1500));
        let finished = now(&fx);
        let ctx = outboxkit_core::AttemptContext {
            attempt: got.lease.attempts,
            snoozes: 0,
            probe: false,
            now: finished,
            jitter: 0.5,
        };
        let verdict = outboxkit_core::classify(outcome, &ctx, &policy);
        let attempt = record(outcome, started, finished, *text);
        fx.store()
            .complete(&got.lease, &Completion { verdict, attempt })
            .await
            .expect("complete");
        fx.clock().advance(secs(3600));
    }
    let id = id.expect("a delivery");
    let attempts = fx.store().attempts(&acme, id).await.expect("attempts");
    assert_eq!(
        attempts.iter().map(|a| a.number).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    for (a, s) in attempts.iter().zip(&starts) {
        assert_eq!(a.delivery_id, id);
        assert!(!a.probe);
        assert_eq!(a.record.started_at, *s);
        assert_eq!(a.duration(), std::time::Duration::from_millis(1500));
    }
    assert_eq!(
        attempts[0].record.outcome,
        AttemptOutcome::Failed(ErrorClass::Response5xx)
    );
    assert_eq!(attempts[0].record.status_code, Some(503));
    let ex = attempts[0].record.excerpt.clone().expect("an excerpt");
    assert!(ex.len() <= 300, "excerpt of {} bytes", ex.len());
    assert!(ex.starts_with("upstream exploded: é"));
    assert_eq!(ex, outboxkit_core::model::excerpt(&long));
    assert_eq!(
        attempts[1].record.outcome,
        AttemptOutcome::Failed(ErrorClass::Timeout)
    );
    assert_eq!(
        (
            attempts[1].record.status_code,
            attempts[1].record.excerpt.clone()
        ),
        (None, None)
    );
    assert_eq!(attempts[2].record.outcome, AttemptOutcome::Succeeded);
    assert_eq!(attempts[2].record.excerpt.as_deref(), Some("ok"));
    let d = delivery(&fx, &acme, id).await;
    let last = d.last_outcome.expect("last outcome");
    assert_eq!(
        (last.outcome, last.status_code, last.excerpt.as_deref()),
        (AttemptOutcome::Succeeded, Some(200), Some("ok"))
    );
    assert_eq!(last.at, attempts[2].record.finished_at);
}

/// Listings are newest first by `(created_at, id)`, `limit` per page, and the cursor is
/// stable when new deliveries arrive between pages.
pub async fn ledger_lists_newest_first_with_stable_cursor(fx: Fixture) {
    add_consumer(&fx, "first", "*").await;
    add_consumer(&fx, "second", "*").await;
    let t = Default::default();
    for i in 0..7 {
        enqueue(&fx, msg("order.created").header("n", i.to_string())).await;
        fx.clock().advance(secs(1));
    }
    let all = list_all(&fx, &t, &DeliveryFilter::default()).await;
    assert_eq!(all.len(), 14);
    let mut sorted = all.clone();
    sorted.sort_by_key(|d| std::cmp::Reverse((d.created_at, d.id)));
    assert_eq!(all, sorted, "newest first by (created_at, id)");

    let f = DeliveryFilter::default();
    let first = fx
        .store()
        .list_deliveries(&t, &f, PageRequest::first(3))
        .await
        .expect("page 1");
    assert_eq!(first.items, all[..3].to_vec());
    let cursor = first.next.expect("more pages");
    assert_eq!(
        (cursor.created_at, cursor.id),
        (all[2].created_at, all[2].id)
    );
    enqueue(&fx, msg("order.created")).await;
    let mut seen: Vec<Delivery> = first.items.clone();
    let mut page = PageRequest {
        limit: 3,
        cursor: Some(cursor),
    };
    loop {
        let p = fx
            .store()
            .list_deliveries(&t, &f, page)
            .await
            .expect("next page");
        assert!(p.items.len() <= 3);
        seen.extend(p.items);
        match p.next {
            Some(c) => page.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(
        seen, all,
        "pages after the cursor ignore newer deliveries and lose none"
    );
    let exact = fx
        .store()
        .list_deliveries(&t, &f, PageRequest::first(16))
        .await
        .expect("exact page");
    assert_eq!(
        (exact.items.len(), exact.next),
        (16, None),
        "no cursor when nothing is left"
    );
    let short = fx
        .store()
        .list_deliveries(&t, &f, PageRequest::first(15))
        .await
        .expect("short page");
    assert!(short.next.is_some());
    assert_kind(
        fx.store()
            .list_deliveries(&t, &f, PageRequest::first(0))
            .await,
        ErrorKind::InvalidInput,
        "limit 0",
    );
}

/// Each filter narrows the listing: status, endpoint, consumer, kind, topic, time range.
pub async fn ledger_filters(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let e = add_endpoint(&fx, "acme", "*").await;
    let acme = tenant("acme");
    let t0 = now(&fx);
    enqueue(
        &fx,
        msg("order.created").tenant("acme").email("ops@example.com"),
    )
    .await;
    fx.clock().advance(secs(10));
    let t1 = now(&fx);
    enqueue(&fx, msg("invoice.paid").tenant("acme")).await;
    let got = claim(&fx, &for_consumer(&c)).await;
    let first = got
        .iter()
        .find(|g| g.message.topic == topic("order.created"))
        .expect("claimed");
    complete_with(
        &fx,
        first,
        Verdict::Succeeded,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;
    let count = |f: DeliveryFilter| {
        let fx = fx.clone();
        let acme = acme.clone();
        async move { list_all(&fx, &acme, &f).await }
    };
    assert_eq!(count(DeliveryFilter::default()).await.len(), 5);
    let ok = count(DeliveryFilter {
        status: Some(DeliveryStatus::Succeeded),
        ..Default::default()
    })
    .await;
    assert_eq!(
        ok.iter().map(|d| d.id).collect::<Vec<_>>(),
        vec![first.delivery.id]
    );
    assert_eq!(
        count(DeliveryFilter {
            status: Some(DeliveryStatus::Processing),
            ..Default::default()
        })
        .await
        .len(),
        1
    );
    assert_eq!(
        count(DeliveryFilter {
            status: Some(DeliveryStatus::Pending),
            ..Default::default()
        })
        .await
        .len(),
        3
    );
    let hooks = count(DeliveryFilter {
        endpoint: Some(e.id),
        ..Default::default()
    })
    .await;
    assert_eq!(hooks.len(), 2);
    assert!(hooks.iter().all(|d| d.destination.endpoint() == Some(e.id)));
    assert_eq!(
        count(DeliveryFilter {
            consumer: Some(c.clone()),
            ..Default::default()
        })
        .await
        .len(),
        2
    );
    let mail = count(DeliveryFilter {
        kind: Some(DestinationKind::Email),
        ..Default::default()
    })
    .await;
    assert_eq!(mail.len(), 1);
    assert_eq!(mail[0].destination.kind(), DestinationKind::Email);
    let topics = count(DeliveryFilter {
        topic: Some(topic("invoice.paid")),
        ..Default::default()
    })
    .await;
    assert_eq!(topics.len(), 2);
    assert!(topics.iter().all(|d| d.topic == topic("invoice.paid")));
    assert_eq!(
        count(DeliveryFilter {
            since: Some(t1),
            ..Default::default()
        })
        .await
        .len(),
        2
    );
    assert_eq!(
        count(DeliveryFilter {
            until: Some(t1),
            ..Default::default()
        })
        .await
        .len(),
        3
    );
    assert_eq!(
        count(DeliveryFilter {
            since: Some(t0),
            until: Some(t1),
            ..Default::default()
        })
        .await
        .len(),
        3
    );
    let both = DeliveryFilter {
        topic: Some(topic("order.created")),
        kind: Some(DestinationKind::Webhook),
        ..Default::default()
    };
    assert_eq!(count(both).await.len(), 1);
    assert!(count(DeliveryFilter {
        status: Some(DeliveryStatus::Dead),
        ..Default::default()
    })
    .await
    .is_empty());
}

/// `mark_sending` turns a claimed e-mail `sending`; after a crash the next claim says so,
/// and a release keeps it `sending`.
pub async fn mark_sending_then_stranded_send_is_flagged(fx: Fixture) {
    enqueue(
        &fx,
        msg("order.created")
            .email("someone@example.com")
            .email("other@example.com"),
    )
    .await;
    let t = Default::default();
    let got = claim(&fx, &for_email()).await;
    assert_eq!(got.len(), 2);
    let (sent, idle) = (&got[0], &got[1]);
    fx.store()
        .mark_sending(&sent.lease)
        .await
        .expect("mark_sending");
    let d = delivery(&fx, &t, sent.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Sending, 1));
    assert_eq!(d.lease_until, Some(sent.lease.until));
    fx.clock().advance(LEASE);
    let again = claim(&fx, &for_email()).await;
    assert_eq!(again.len(), 2);
    let resent = again
        .iter()
        .find(|c| c.delivery.id == sent.delivery.id)
        .expect("the stranded send");
    let other = again
        .iter()
        .find(|c| c.delivery.id == idle.delivery.id)
        .expect("the stranded claim");
    assert!(resent.lease.was_sending());
    assert_eq!(
        (resent.lease.claimed_from, resent.lease.attempts),
        (DeliveryStatus::Sending, 2)
    );
    assert!(!other.lease.was_sending());
    assert_eq!(other.lease.claimed_from, DeliveryStatus::Processing);
    let r = fx
        .store()
        .release(std::slice::from_ref(&resent.lease), secs(5))
        .await
        .expect("release");
    assert_eq!(r.released, 1);
    let d = delivery(&fx, &t, sent.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Sending, 1, now(&fx).saturating_add(secs(5)))
    );
    fx.clock().advance(secs(5));
    let third = claim_one(&fx, &for_email()).await;
    assert!(third.lease.was_sending());
    assert_eq!(third.lease.attempts, 2);
    let policy = webhook_policy();
    let v = settle(&fx, &third, Outcome::Mail(Ok(())), &policy).await;
    assert_eq!(v, Verdict::Succeeded);
    assert_eq!(
        delivery(&fx, &t, sent.delivery.id).await.status,
        DeliveryStatus::Succeeded
    );
}

/// Three deliveries to one consumer, claimed; a lease of the second with a forged token; a
/// handler's successful attempt record.
async fn three_claimed_one_stale(fx: &Fixture) -> (Vec<Claimed>, Lease, Option<AttemptRecord>) {
    let c = add_consumer(fx, "worker", "*").await;
    for _ in 0..3 {
        enqueue(fx, msg("order.created")).await;
    }
    let got = claim(fx, &for_consumer(&c)).await;
    assert_eq!(got.len(), 3);
    let stale = Lease {
        token: outboxkit_core::ClaimToken::generate(&OsEntropy),
        ..got[1].lease.clone()
    };
    let rec = record(
        &Outcome::Handler(HandlerOutcome::Ok),
        now(fx),
        now(fx),
        None,
    );
    (got, stale, rec)
}

/// Complete the three `items` in one call: the first and third apply, the second (a stale
/// lease) fails alone as `LeaseLost`.
async fn complete_all_but_the_stale_second(fx: &Fixture, items: &[(Lease, Completion)]) {
    let results = fx
        .store()
        .complete_many(items)
        .await
        .expect("complete_many");
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert_eq!(
        results[1].as_ref().map_err(|e| e.kind()),
        Err(ErrorKind::LeaseLost)
    );
}

/// `complete_many` applies each item on its own and reports one result per item, in
/// order; a stale lease fails alone.
pub async fn complete_many_mixed_results(fx: Fixture) {
    let t = Default::default();
    let (got, stale, rec) = three_claimed_one_stale(&fx).await;
    let retry_at = now(&fx).saturating_add(secs(120));
    let items = vec![
        (
            got[0].lease.clone(),
            Completion {
                verdict: Verdict::Succeeded,
                attempt: rec.clone(),
            },
        ),
        (
            stale,
            Completion {
                verdict: Verdict::Succeeded,
                attempt: rec.clone(),
            },
        ),
        (
            got[2].lease.clone(),
            Completion {
                verdict: Verdict::Retry { at: retry_at },
                attempt: rec,
            },
        ),
    ];
    complete_all_but_the_stale_second(&fx, &items).await;
    assert_eq!(
        delivery(&fx, &t, got[0].delivery.id).await.status,
        DeliveryStatus::Succeeded
    );
    let mid = delivery(&fx, &t, got[1].delivery.id).await;
    assert_eq!(
        (mid.status, mid.lease_until),
        (DeliveryStatus::Processing, Some(got[1].lease.until))
    );
    assert!(fx
        .store()
        .attempts(&t, mid.id)
        .await
        .expect("attempts")
        .is_empty());
    let last = delivery(&fx, &t, got[2].delivery.id).await;
    assert_eq!(
        (last.status, last.next_attempt_at),
        (DeliveryStatus::Pending, retry_at)
    );
    assert_eq!(
        fx.store()
            .complete_many(&[])
            .await
            .expect("nothing to complete")
            .len(),
        0
    );
}

/// A batch in which every item finishes (succeeded or dead; a store may take a shorter path
/// for it) is still fenced per item: a stale lease among them changes nothing, the others
/// finish with their attempts.
pub async fn complete_many_all_finishing(fx: Fixture) {
    let t = Default::default();
    let (got, stale, rec) = three_claimed_one_stale(&fx).await;
    let done = |verdict| Completion {
        verdict,
        attempt: rec.clone(),
    };
    let items = vec![
        (got[0].lease.clone(), done(Verdict::Succeeded)),
        (stale, done(Verdict::Succeeded)),
        (
            got[2].lease.clone(),
            done(Verdict::Dead {
                reason: DeadReason::Permanent,
            }),
        ),
    ];
    complete_all_but_the_stale_second(&fx, &items).await;
    let first = delivery(&fx, &t, got[0].delivery.id).await;
    assert_eq!(first.status, DeliveryStatus::Succeeded);
    let mid = delivery(&fx, &t, got[1].delivery.id).await;
    assert_eq!(
        (mid.status, mid.lease_until),
        (DeliveryStatus::Processing, Some(got[1].lease.until))
    );
    let last = delivery(&fx, &t, got[2].delivery.id).await;
    assert_eq!(
        (last.status, last.dead_reason),
        (DeliveryStatus::Dead, Some(DeadReason::Permanent))
    );
    for (id, attempts) in [(first.id, 1), (mid.id, 0), (last.id, 1)] {
        let got = fx.store().attempts(&t, id).await.expect("attempts");
        assert_eq!(got.len(), attempts, "attempts of {id}");
    }
}
