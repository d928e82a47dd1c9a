//! Enqueue and fan-out.

use std::collections::BTreeSet;
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, DeliveryFilter, DeliveryStatus, Destination, DisabledReason, EndpointStatus,
    ErrorKind, NewMessage, Recipient, Stats,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// A claim that names no source is refused with `InvalidInput` and changes nothing; a claim
/// for another consumer takes nothing.
pub async fn empty_allowlist_is_refused(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let e = enqueue(&fx, msg("order.created")).await;
    assert_eq!(e.deliveries, 1);
    let r = fx.store().claim(&ClaimRequest::new(10, LEASE)).await;
    assert_kind(r, ErrorKind::InvalidInput, "claim with no sources");
    let other = add_consumer(&fx, "other", "nothing.matches").await;
    claim_none(&fx, &for_consumer(&other)).await;
    let d = only_delivery(&fx, &Default::default()).await;
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!(d.attempts, 0);
    assert_eq!(d.lease_until, None);
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(got.delivery.id, d.id);
}

/// Payload, headers, topic, tenant and keys come back byte for byte through claim and the
/// ledger; completion ends the delivery.
pub async fn enqueue_claim_complete_round_trip(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let t0 = now(&fx);
    let payload: Vec<u8> = vec![0x00, 0xff, b'{', b'"', 0x7f, 0xc3, 0x28, b'\n', 0x01];
    let m = NewMessage::raw("order.created", payload.clone())
        .tenant("acme")
        .ordering_key("order:42")
        .idempotency_key("idem-42")
        .header("trace-id", "abc-123")
        .header("x.note", "héllo\twörld");
    let e = enqueue(&fx, m).await;
    assert_eq!((e.deliveries, e.duplicate), (1, false));
    let acme = tenant("acme");
    let stored = fx
        .store()
        .get_message(&acme, e.message_id)
        .await
        .expect("get_message");
    assert_eq!(stored.id, e.message_id);
    assert_eq!(stored.payload, payload);
    assert_eq!(stored.topic.as_str(), "order.created");
    assert_eq!(stored.tenant, acme);
    assert_eq!(
        stored.ordering_key.as_ref().map(|k| k.as_str()),
        Some("order:42")
    );
    assert_eq!(
        stored.idempotency_key.as_ref().map(|k| k.as_str()),
        Some("idem-42")
    );
    assert_eq!(stored.headers.len(), 2);
    assert_eq!(
        stored.headers.get("trace-id").map(String::as_str),
        Some("abc-123")
    );
    assert_eq!(
        stored.headers.get("x.note").map(String::as_str),
        Some("héllo\twörld")
    );
    assert_eq!(stored.created_at, t0);
    assert_eq!(stored.available_at, t0);
    assert_eq!(stored.cause, None);

    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(got.message, stored, "the claimed message is the stored one");
    assert_eq!(got.delivery.message_id, e.message_id);
    assert_eq!(got.delivery.destination, Destination::Handler(c.clone()));
    assert_eq!(got.delivery.status, DeliveryStatus::Processing);
    assert_eq!(got.delivery.attempts, 1);
    assert_eq!(got.delivery.tenant, acme);
    assert_eq!(got.delivery.topic.as_str(), "order.created");
    assert_eq!(got.delivery.lease_until, Some(t0.saturating_add(LEASE)));
    assert_eq!(got.delivery.next_attempt_at, t0.saturating_add(LEASE));
    assert_eq!(got.delivery.created_at, t0);
    assert_eq!(got.lease.delivery_id, got.delivery.id);
    assert_eq!(got.lease.tenant, acme);
    assert_eq!(got.lease.until, t0.saturating_add(LEASE));
    assert_eq!(got.lease.attempts, 1);
    assert_eq!(got.lease.claimed_from, DeliveryStatus::Pending);
    assert_eq!(delivery(&fx, &acme, got.delivery.id).await, got.delivery);

    fx.clock().advance(secs(2));
    let policy = handler_policy(8);
    let v = settle(
        &fx,
        &got,
        outboxkit_core::Outcome::Handler(outboxkit_core::HandlerOutcome::Ok),
        &policy,
    )
    .await;
    assert_eq!(v, outboxkit_core::Verdict::Succeeded);
    let done = delivery(&fx, &acme, got.delivery.id).await;
    assert_eq!(done.status, DeliveryStatus::Succeeded);
    assert_eq!(done.completed_at, Some(now(&fx)));
    assert_eq!(done.updated_at, now(&fx));
    assert_eq!(done.lease_until, None);
    assert_eq!(done.attempts, 1);
    assert!(done.last_outcome.is_some());
    let attempts = fx.store().attempts(&acme, done.id).await.expect("attempts");
    assert_eq!(attempts.len(), 1);
    fx.clock().advance(secs(3600));
    claim_none(&fx, &for_consumer(&c)).await;
}

/// A second message with the same `(tenant, topic, idempotency key)` writes nothing and
/// returns the first id; another topic or tenant is a new message.
pub async fn idempotent_enqueue(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    let first = enqueue(
        &fx,
        NewMessage::raw("order.created", b"first".to_vec()).idempotency_key("k-1"),
    )
    .await;
    assert!(!first.duplicate);
    assert_eq!(first.deliveries, 1);
    fx.clock().advance(secs(5));
    let again = enqueue(
        &fx,
        NewMessage::raw("order.created", b"second".to_vec()).idempotency_key("k-1"),
    )
    .await;
    assert!(again.duplicate);
    assert_eq!(again.message_id, first.message_id);
    assert_eq!(again.deliveries, 0);
    let t = Default::default();
    let stored = fx
        .store()
        .get_message(&t, first.message_id)
        .await
        .expect("get_message");
    assert_eq!(
        stored.payload,
        b"first".to_vec(),
        "the first message is kept"
    );
    assert_eq!(list_all(&fx, &t, &DeliveryFilter::default()).await.len(), 1);

    let other_topic = enqueue(&fx, msg("order.updated").idempotency_key("k-1")).await;
    assert!(!other_topic.duplicate);
    assert_ne!(other_topic.message_id, first.message_id);
    let other_tenant = enqueue(
        &fx,
        msg("order.created").tenant("beta").idempotency_key("k-1"),
    )
    .await;
    assert!(!other_tenant.duplicate);
    assert_ne!(other_tenant.message_id, first.message_id);
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!(stats.pending, 3);
}

/// Every kind of invalid message is `InvalidInput` and writes nothing, not even its
/// idempotency key.
pub async fn invalid_message_writes_nothing(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    add_endpoint(&fx, "default", "*").await;
    let bad = [
        NewMessage::raw("Bad Topic", b"{}".to_vec()),
        NewMessage::raw("", b"{}".to_vec()),
        NewMessage::raw("order.created", vec![b'x'; 256 * 1024 + 1]),
        msg("order.created").tenant("a b"),
        msg("order.created").header("bad name", "v"),
        msg("order.created").header("x", [0xff, 0xfe]),
        msg("order.created").delay(Duration::from_secs(400 * 86_400)),
        msg("order.created").email(""),
        msg("order.created").ordering_key("has space"),
    ];
    for m in bad {
        let m = m.idempotency_key("same-key").email("someone@example.com");
        assert_kind(
            fx.store().enqueue(m).await,
            ErrorKind::InvalidInput,
            "invalid message",
        );
    }
    assert_eq!(fx.store().stats().await.expect("stats"), Stats::default());
    assert!(
        list_all(&fx, &Default::default(), &DeliveryFilter::default())
            .await
            .is_empty()
    );
    let ok = enqueue(&fx, msg("order.created").idempotency_key("same-key")).await;
    assert!(
        !ok.duplicate,
        "a refused message must not reserve its idempotency key"
    );
    assert_eq!(ok.deliveries, 2);
}

/// A batch with one invalid message writes nothing; a valid batch writes every message, a
/// repeated key inside it is a duplicate of the earlier one.
pub async fn batch_enqueue_is_all_or_nothing(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    let r = fx
        .store()
        .enqueue_batch(vec![
            msg("a.one"),
            msg("a.two"),
            NewMessage::raw("NOPE", b"1".to_vec()),
        ])
        .await;
    assert_kind(r, ErrorKind::InvalidInput, "batch with an invalid message");
    assert_eq!(fx.store().stats().await.expect("stats").total(), 0);

    let out = fx
        .store()
        .enqueue_batch(vec![
            msg("a.one").idempotency_key("k"),
            msg("a.two"),
            msg("a.one").idempotency_key("k"),
            msg("a.three").tenant("beta"),
        ])
        .await
        .expect("enqueue_batch");
    assert_eq!(out.len(), 4);
    assert!(!out[0].duplicate && !out[1].duplicate && !out[3].duplicate);
    assert!(out[2].duplicate);
    assert_eq!(out[2].message_id, out[0].message_id);
    assert_eq!(out[2].deliveries, 0);
    assert_eq!(out.iter().map(|e| e.deliveries).sum::<u32>(), 3);
    let distinct: BTreeSet<_> = out.iter().map(|e| e.message_id).collect();
    assert_eq!(distinct.len(), 3);
    assert_eq!(fx.store().stats().await.expect("stats").pending, 3);
    let beta = tenant("beta");
    fx.store()
        .get_message(&beta, out[3].message_id)
        .await
        .expect("get_message");
    let later = fx
        .store()
        .enqueue_batch(vec![msg("a.one").idempotency_key("k"), msg("a.four")])
        .await
        .expect("enqueue_batch");
    assert!(later[0].duplicate, "a duplicate of a stored message");
    assert_eq!(later[0].message_id, out[0].message_id);
    assert!(!later[1].duplicate);
    let empty = fx
        .store()
        .enqueue_batch(Vec::new())
        .await
        .expect("empty batch");
    assert!(empty.is_empty());
}

/// One delivery per matching consumer, per matching endpoint of the tenant, per e-mail
/// recipient; a paused or disabled endpoint's delivery is written `held` for it; a message
/// matching nothing is still recorded.
pub async fn fan_out_at_enqueue(fx: Fixture) {
    let lonely = enqueue(&fx, msg("lonely.topic").tenant("acme")).await;
    assert_eq!(lonely.deliveries, 0);
    let acme = tenant("acme");
    let m = fx
        .store()
        .get_message(&acme, lonely.message_id)
        .await
        .expect("a message with no deliveries is recorded");
    assert_eq!(m.topic.as_str(), "lonely.topic");

    let all = add_consumer(&fx, "all", "*").await;
    let exact = add_consumer(&fx, "exact", "order.created").await;
    let prefix = add_consumer(&fx, "prefix", "order.*").await;
    let _other = add_consumer(&fx, "invoices", "invoice.*,order").await;
    let e_all = add_endpoint(&fx, "acme", "*").await;
    let e_exact = add_endpoint(&fx, "acme", "order.created").await;
    let e_prefix = add_endpoint(&fx, "acme", "billing.*,order.*").await;
    let paused = add_endpoint_with(&fx, "acme", "*", EndpointStatus::Paused).await;
    let disabled = add_endpoint_with(
        &fx,
        "acme",
        "*",
        EndpointStatus::Disabled(DisabledReason::Manual),
    )
    .await;
    let _nomatch = add_endpoint(&fx, "acme", "invoice.paid").await;
    let _beta = add_endpoint(&fx, "beta", "*").await;

    let e = enqueue(
        &fx,
        msg("order.created")
            .tenant("acme")
            .email("x@example.com")
            .email("y@example.com")
            .email("x@example.com"),
    )
    .await;
    assert_eq!(e.deliveries, 10);
    let waiting = [Some(paused.id), Some(disabled.id)];
    let got: BTreeSet<Destination> = list_all(&fx, &acme, &DeliveryFilter::default())
        .await
        .into_iter()
        .filter(|d| d.message_id == e.message_id)
        .map(|d| {
            let want = if waiting.contains(&d.destination.endpoint()) {
                DeliveryStatus::Held
            } else {
                DeliveryStatus::Pending
            };
            assert_eq!(d.status, want, "{:?}", d.destination);
            assert_eq!(d.attempts, 0);
            d.destination
        })
        .collect();
    let want: BTreeSet<Destination> = [
        Destination::Handler(all.clone()),
        Destination::Handler(exact.clone()),
        Destination::Handler(prefix.clone()),
        Destination::Webhook(e_all.id),
        Destination::Webhook(e_exact.id),
        Destination::Webhook(e_prefix.id),
        Destination::Webhook(paused.id),
        Destination::Webhook(disabled.id),
        Destination::Email(Recipient::new("x@example.com").expect("recipient")),
        Destination::Email(Recipient::new("y@example.com").expect("recipient")),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);

    let deep = enqueue(&fx, msg("order.item.added").tenant("acme")).await;
    assert_eq!(deep.deliveries, 6, "`*` and `order.*` match deeper topics");
    let bare = enqueue(&fx, msg("order").tenant("acme")).await;
    assert_eq!(bare.deliveries, 5, "`order.*` does not match `order`");
    assert!(list_all(&fx, &tenant("beta"), &DeliveryFilter::default())
        .await
        .is_empty());
    let stats = fx.store().stats().await.expect("stats");
    assert_eq!((stats.pending, stats.held), (15, 6));
}

/// A wake listener, when the store has one, is woken by an enqueue from this handle or a
/// second one.
pub async fn wake_listener_wakes_on_enqueue(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    let second = fx.second_handle().await;
    for (i, writer) in [fx.store().clone(), second].into_iter().enumerate() {
        match fx.store().wake_listener() {
            Some(mut listener) => {
                let mut woken = false;
                for _ in 0..50 {
                    let e = writer.enqueue(msg("order.created")).await.expect("enqueue");
                    assert_eq!(e.deliveries, 1);
                    if tokio::time::timeout(Duration::from_millis(200), listener.woken())
                        .await
                        .is_ok()
                    {
                        woken = true;
                        break;
                    }
                }
                assert!(
                    woken,
                    "the listener was not woken by enqueues from handle {i}"
                );
            }
            None => {
                let e = writer.enqueue(msg("order.created")).await.expect("enqueue");
                assert_eq!(e.deliveries, 1);
            }
        }
    }
    assert!(fx.store().stats().await.expect("stats").pending >= 2);
}

/// A follow-up message's cause comes back as written.
pub async fn caused_by_round_trips(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    let first = enqueue(&fx, msg("order.created")).await;
    let cause = outboxkit_core::Cause {
        handler: c.clone(),
        message_id: first.message_id,
        topic: topic("order.created"),
        depth: 1,
    };
    let e = enqueue(&fx, msg("order.shipped").caused_by(cause.clone())).await;
    let t = Default::default();
    let m = fx
        .store()
        .get_message(&t, e.message_id)
        .await
        .expect("get_message");
    assert_eq!(m.cause, Some(cause.clone()));
    let first_msg = fx
        .store()
        .get_message(&t, first.message_id)
        .await
        .expect("get_message");
    assert_eq!(first_msg.cause, None);
    let claimed = claim(&fx, &for_consumer(&c)).await;
    let follow = claimed
        .iter()
        .find(|x| x.message.id == e.message_id)
        .expect("the follow-up");
    assert_eq!(follow.message.cause, Some(cause));
    let too_deep = outboxkit_core::Cause {
        depth: 6,
        ..follow.message.cause.clone().expect("cause")
    };
    let r = fx
        .store()
        .enqueue(msg("order.shipped").caused_by(too_deep))
        .await;
    assert_kind(r, ErrorKind::InvalidInput, "a chain deeper than the limit");
}

/// Replay, retry now, release held and a secret rotation wake a listener, when the store
/// has one.
pub async fn wake_listener_wakes_on_operator_calls(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    let e = add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    enqueue(&fx, msg("order.updated").delay(Duration::from_secs(3600))).await;
    let t = outboxkit_core::TenantId::default();
    let mut hooks = claim(&fx, &for_webhooks()).await;
    assert_eq!(hooks.len(), 1);
    let hook = hooks.remove(0);
    settle(&fx, &hook, http(401), &webhook_policy()).await;
    let got = claim_one(&fx, &for_consumer(&c)).await;
    let discard = outboxkit_core::Outcome::Handler(outboxkit_core::HandlerOutcome::Discard);
    settle(&fx, &got, discard, &handler_policy(8)).await;
    let delayed = list_all(
        &fx,
        &t,
        &DeliveryFilter {
            status: Some(DeliveryStatus::Pending),
            consumer: Some(c.clone()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(delayed.len(), 1);

    let Some(mut listener) = fx.store().wake_listener() else {
        fx.store()
            .replay(&t, got.delivery.id)
            .await
            .expect("replay");
        fx.store()
            .retry_now(&t, delayed[0].id)
            .await
            .expect("retry_now");
        assert_eq!(
            fx.store()
                .release_held(&t, e.id)
                .await
                .expect("release_held"),
            1
        );
        return;
    };
    // Make sure the listener is established (some backends subscribe asynchronously).
    let mut ready = false;
    for _ in 0..50 {
        enqueue(&fx, msg("noise.event")).await;
        if tokio::time::timeout(Duration::from_millis(200), listener.woken())
            .await
            .is_ok()
        {
            ready = true;
            break;
        }
    }
    assert!(ready, "the listener never woke on enqueue");
    let wait = Duration::from_secs(10);
    // Drain wake-ups that were already on their way.
    while tokio::time::timeout(Duration::from_millis(100), listener.woken())
        .await
        .is_ok()
    {}

    fx.store()
        .replay(&t, got.delivery.id)
        .await
        .expect("replay");
    assert!(
        tokio::time::timeout(wait, listener.woken()).await.is_ok(),
        "replay did not wake"
    );
    fx.store()
        .retry_now(&t, delayed[0].id)
        .await
        .expect("retry_now");
    assert!(
        tokio::time::timeout(wait, listener.woken()).await.is_ok(),
        "retry_now did not wake"
    );
    assert_eq!(
        fx.store()
            .release_held(&t, e.id)
            .await
            .expect("release_held"),
        1
    );
    assert!(
        tokio::time::timeout(wait, listener.woken()).await.is_ok(),
        "release_held did not wake"
    );
    // A cancel may free the next delivery of its ordering key.
    fx.store().cancel(&t, delayed[0].id).await.expect("cancel");
    assert!(
        tokio::time::timeout(wait, listener.woken()).await.is_ok(),
        "cancel did not wake"
    );
}

/// Concurrent enqueues with one idempotency key, from independent handles, write one
/// message: every caller gets its id, exactly one is not a duplicate.
pub async fn idempotent_enqueue_under_concurrency(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = fx.second_handle().await;
        tasks.push(tokio::spawn(async move {
            let m = NewMessage::raw("order.created", format!("{i}").into_bytes())
                .idempotency_key("race");
            store.enqueue(m).await.expect("enqueue")
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("enqueue task"));
    }
    let ids: BTreeSet<_> = out.iter().map(|e| e.message_id).collect();
    assert_eq!(ids.len(), 1, "every caller gets the same message id");
    assert_eq!(out.iter().filter(|e| !e.duplicate).count(), 1);
    assert_eq!(out.iter().map(|e| e.deliveries).sum::<u32>(), 1);
    let all = list_all(&fx, &Default::default(), &DeliveryFilter::default()).await;
    assert_eq!(all.len(), 1);
}
