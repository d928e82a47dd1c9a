//! The webhook channel end to end.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::Clock;
use outboxkit_core::{
    AttemptOutcome, DeadReason, DeliveryStatus, DisabledReason, EndpointStatus, ErrorClass,
    NewMessage, WebhookResponse,
};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::{Reply, ScriptedTransport, WebhookReceiver};

use crate::{mins, world, BUDGET};

fn loopback() -> Arc<HttpTransport> {
    Arc::new(
        HttpTransport::new(
            EgressPolicy::default()
                .allow_http(true)
                .allow_cidr("127.0.0.0/8")
                .unwrap(),
        )
        .unwrap(),
    )
}

#[tokio::test]
async fn a_whole_retry_schedule_is_walked_by_the_clock() {
    let w = world();
    let transport = ScriptedTransport::new();
    transport.set_default(WebhookResponse::answered(503, None, "down"));
    let d = w.webhook_dispatcher(Arc::new(transport.clone()));
    w.endpoint("https://hooks.example/x").await;
    w.store
        .enqueue(NewMessage::new(
            "order.created",
            serde_json::json!({"id": 1}),
        ))
        .await
        .unwrap();

    let schedule = [mins(1), mins(5), mins(30), mins(120), mins(720)];
    for (i, step) in schedule.iter().enumerate() {
        let r = d.run_once(BUDGET).await.unwrap();
        assert_eq!((r.claimed, r.retried), (1, 1), "attempt {}", i + 1);
        let del = w.one().await;
        assert_eq!(del.status, DeliveryStatus::Pending);
        assert_eq!(del.attempts, i as u32 + 1);
        assert_eq!(del.next_attempt_at, w.clock.now().saturating_add(*step));
        // Not due a second early.
        w.advance(*step - Duration::from_secs(1));
        assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
        w.advance(Duration::from_secs(1));
    }
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.dead, 1);
    let del = w.one().await;
    assert_eq!(
        (del.status, del.dead_reason, del.attempts),
        (DeliveryStatus::Dead, Some(DeadReason::MaxAttempts), 6)
    );
    assert_eq!(transport.count(), 6);
    let ledger = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert_eq!(ledger.len(), 6);
    assert!(ledger.iter().all(|a| a.record.outcome
        == AttemptOutcome::Failed(ErrorClass::Response5xx)
        && a.record.status_code == Some(503)));
    // The same webhook-id on every attempt.
    let ids: std::collections::HashSet<_> = transport
        .requests()
        .iter()
        .map(|r| r.header("webhook-id").unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(ids.into_iter().next().unwrap(), del.id.to_string());
}

#[tokio::test]
async fn a_401_is_held_probed_for_free_and_released_by_rotating_the_secret() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let (ep, secret) = w.endpoint(&receiver.url()).await;
    receiver.set_secrets(vec![secret.clone()]);
    receiver.refuse(401);
    let d = w.webhook_dispatcher(loopback());
    w.store
        .enqueue(NewMessage::new(
            "order.created",
            serde_json::json!({"id": 1}),
        ))
        .await
        .unwrap();

    assert_eq!(d.run_once(BUDGET).await.unwrap().held, 1);
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Held, 1));
    assert_eq!(
        del.next_attempt_at,
        w.clock.now().saturating_add(Duration::from_secs(3600))
    );
    assert!(
        receiver.requests()[0].verified(),
        "the receiver verified our signature"
    );

    // An hour later: a probe, still 401, spends nothing.
    w.advance(Duration::from_secs(3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().held, 1);
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Held, 1));
    let ledger = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert_eq!(
        ledger.iter().map(|a| a.probe).collect::<Vec<_>>(),
        vec![false, true]
    );

    // Rotating the secret releases it at once; the receiver learns the new secret.
    let new = w.admin.rotate_secret(&w.tenant, ep, None).await.unwrap();
    assert_eq!(w.one().await.status, DeliveryStatus::Pending);
    receiver.set_secrets(vec![new.clone()]);
    receiver.heal();
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    let last = receiver.requests().pop().unwrap();
    assert!(last.verified());
    let sig = last.header("webhook-signature").unwrap();
    assert_eq!(
        sig.split(' ').count(),
        2,
        "during rotation both secrets sign"
    );
    // A receiver that knows only the old secret, or only the new one, accepts it.
    let names = outboxkit_core::HeaderNames::default();
    for s in [&secret, &new] {
        let r = outboxkit_core::verify(
            &[s],
            &names,
            |n| last.header(n),
            &last.body,
            w.clock.now(),
            Duration::from_secs(300),
        );
        assert_eq!(r, Ok(()));
    }
}

#[tokio::test]
async fn a_410_kills_the_delivery_and_disables_the_endpoint() {
    let w = world();
    let transport = ScriptedTransport::new();
    transport.push(WebhookResponse::answered(410, None, "gone"));
    let d = w.webhook_dispatcher(Arc::new(transport));
    let (ep, _) = w.endpoint("https://hooks.example/gone").await;
    w.store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 1);
    let del = w.one().await;
    assert_eq!(del.dead_reason, Some(DeadReason::Gone));
    let e = w.store.get_endpoint(&w.tenant, ep).await.unwrap();
    assert_eq!(e.status, EndpointStatus::Disabled(DisabledReason::Gone));
    // A disabled endpoint's new deliveries are written and wait for it: nothing is sent.
    let r = w
        .store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(r.deliveries, 1);
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
}

#[tokio::test]
async fn a_receiver_that_stalls_after_its_headers_times_out_and_is_retried() {
    let w = world();
    let receiver = WebhookReceiver::start().await.unwrap();
    receiver.script([Reply::StallAfterHeaders(200)]);
    w.endpoint(&receiver.url()).await;
    let config = outboxkit_dispatch::DispatcherConfig {
        webhook_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let d = w
        .builder()
        .config(config)
        .webhooks(loopback(), Arc::new(outboxkit_core::PlaintextVault))
        .build()
        .unwrap();
    w.store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.retried, 1);
    let del = w.one().await;
    let ledger = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert_eq!(
        ledger[0].record.outcome,
        AttemptOutcome::Failed(ErrorClass::Timeout)
    );
}

#[tokio::test]
async fn paused_endpoints_park_without_spending_and_retry_after_is_honoured() {
    let w = world();
    let transport = ScriptedTransport::new();
    transport.push(WebhookResponse::answered(
        429,
        Some("900".into()),
        "slow down",
    ));
    let d = w.webhook_dispatcher(Arc::new(transport));
    let (ep, _) = w.endpoint("https://hooks.example/x").await;
    w.store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})))
        .await
        .unwrap();
    w.admin
        .set_status(&w.tenant, ep, EndpointStatus::Paused)
        .await
        .unwrap();
    // The pause holds the queued delivery for the endpoint: not claimed, nothing spent.
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Held, 0));
    assert_eq!(del.next_attempt_at, outboxkit_core::Timestamp::MAX);
    w.advance(Duration::from_secs(3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
    // The resume makes it due at once.
    w.admin
        .set_status(&w.tenant, ep, EndpointStatus::Active)
        .await
        .unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    let del = w.one().await;
    assert_eq!(
        del.next_attempt_at,
        w.clock.now().saturating_add(Duration::from_secs(900)),
        "Retry-After: 900 beats the 60 s step"
    );
}

#[tokio::test]
async fn endpoint_admin_refuses_what_its_url_policy_refuses_and_writes_nothing() {
    let w = world();
    let vault = Arc::new(outboxkit_core::PlaintextVault);
    let strict = outboxkit_dispatch::EndpointAdmin::new(
        w.store.clone(),
        vault.clone(),
        w.clock.clone(),
        outboxkit_testing::SeededEntropy::new(1),
    );
    let egress = outboxkit_dispatch::EndpointAdmin::new(
        w.store.clone(),
        vault,
        w.clock.clone(),
        outboxkit_testing::SeededEntropy::new(2),
    )
    .with_url_policy(Arc::new(EgressPolicy::default()));
    let new = |url: &str| outboxkit_dispatch::NewEndpoint {
        url: url.into(),
        ..Default::default()
    };
    let cases = [
        (&strict, "http://hooks.example/x"),
        (&egress, "http://hooks.example/x"),
        (&egress, "https://127.0.0.1/x"),
        (&egress, "https://[::ffff:10.0.0.1]/x"),
        (&egress, "https://169.254.169.254/latest"),
        (&egress, "https://localhost/x"),
    ];
    for (admin, url) in cases {
        let e = admin.create(&w.tenant, new(url)).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (outboxkit_core::ErrorKind::InvalidInput, Some("url")),
            "{url}"
        );
    }
    // A URL change is checked too.
    let (ok, _) = strict
        .create(&w.tenant, new("https://hooks.example/x"))
        .await
        .unwrap();
    let change = outboxkit_core::EndpointUpdate {
        url: Some(outboxkit_core::EndpointUrl::parse("http://hooks.example/y").unwrap()),
        ..Default::default()
    };
    assert!(strict.update(&w.tenant, ok.id, change).await.is_err());
    let endpoints = w.store.list_endpoints(&w.tenant).await.unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0].url.as_str(), "https://hooks.example/x");
}

/// Answers 200, except that it panics on the first send of `{"i":0}` and never answers
/// `{"i":1}`.
#[derive(Debug, Default)]
struct Unruly {
    panicked: std::sync::atomic::AtomicBool,
    sends: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl outboxkit_core::WebhookTransport for Unruly {
    async fn send(&self, request: outboxkit_core::SignedRequest) -> WebhookResponse {
        use std::sync::atomic::Ordering;
        self.sends.fetch_add(1, Ordering::SeqCst);
        let body = String::from_utf8_lossy(&request.body).into_owned();
        if body.contains(r#"{"i":0}"#) && !self.panicked.swap(true, Ordering::SeqCst) {
            panic!("the transport fell over");
        }
        if body.contains(r#"{"i":1}"#) {
            std::future::pending::<()>().await;
        }
        WebhookResponse::answered(200, None, "")
    }
}

#[tokio::test]
async fn a_panicking_send_spends_its_attempt_a_hanging_one_is_released_the_others_go_on() {
    let w = world();
    let transport = Arc::new(Unruly::default());
    let d = w.webhook_dispatcher(transport.clone());
    w.endpoint("https://hooks.example/x").await;
    w.enqueue_n(5).await;
    let (tx, run) = crate::spawn_run(&d);
    // The panic spends its attempt like a failed send (retried after the policy's delay);
    // the hanging one holds its slot; the rest are delivered meanwhile.
    for _ in 0..500 {
        if w.count(DeliveryStatus::Succeeded).await == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 3);
    tx.send(()).unwrap();
    // The hanging send gets the grace period, then is aborted and released.
    tokio::time::sleep(Duration::from_millis(50)).await;
    w.advance(Duration::from_secs(11));
    let r = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.succeeded, r.retried, r.released), (3, 1, 1), "{r}");
    assert_eq!(transport.sends.load(std::sync::atomic::Ordering::SeqCst), 5);
    let mut ledger = 0;
    for del in w.deliveries().await {
        let attempts = w.store.attempts(&w.tenant, del.id).await.unwrap();
        match del.status {
            // The one that panicked: the attempt is spent and in the ledger, as the panic.
            DeliveryStatus::Pending if del.attempts == 1 => {
                assert_eq!(attempts.len(), 1);
                assert_eq!(
                    attempts[0].record.excerpt.as_deref(),
                    Some("the webhook transport panicked")
                );
                assert!(del.next_attempt_at > w.clock.now(), "retried after a delay");
            }
            DeliveryStatus::Succeeded => assert_eq!((del.attempts, attempts.len()), (1, 1)),
            // Aborted at shutdown: back, unstarted, nothing in its ledger.
            _ => assert_eq!(
                (del.status, del.attempts, attempts.len()),
                (DeliveryStatus::Pending, 0, 0)
            ),
        }
        ledger += attempts.len();
    }
    assert_eq!(ledger, 4);
}

/// Panics on every send.
#[derive(Debug, Default)]
struct AlwaysPanics {
    sends: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl outboxkit_core::WebhookTransport for AlwaysPanics {
    async fn send(&self, _request: outboxkit_core::SignedRequest) -> WebhookResponse {
        self.sends.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        panic!("the transport has a bug");
    }
}

/// A send that panics every time spends an attempt each time (the panic is in the
/// ledger) and ends dead after the budget, instead of being handed out again and again.
#[tokio::test]
async fn a_send_that_always_panics_spends_its_attempts_and_dies() {
    let w = world();
    let transport = Arc::new(AlwaysPanics::default());
    let d = w.webhook_dispatcher(transport.clone());
    w.endpoint("https://hooks.example/x").await;
    w.enqueue_n(1).await;
    let mut claims = 0;
    for _ in 0..20 {
        let r = d.run_once(BUDGET).await.unwrap();
        claims += r.claimed;
        if w.count(DeliveryStatus::Dead).await == 1 {
            break;
        }
        w.advance(Duration::from_secs(86_400));
    }
    let del = w.deliveries().await.remove(0);
    assert_eq!(del.status, DeliveryStatus::Dead, "{del:?}");
    let attempts = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert!(!attempts.is_empty());
    assert_eq!(
        attempts.len() as u32,
        del.attempts,
        "every attempt is in the ledger"
    );
    assert!(attempts
        .iter()
        .all(|a| a.record.excerpt.as_deref() == Some("the webhook transport panicked")));
    assert_eq!(
        transport.sends.load(std::sync::atomic::Ordering::SeqCst) as u64,
        claims,
        "each claim was one send, none released unspent"
    );
}

/// A dispatcher whose vault cannot open the endpoint's secret (a wrong key) sends nothing,
/// spends no attempt, and says why in the ledger.
#[tokio::test]
async fn a_secret_the_vault_cannot_open_parks_the_delivery_with_the_reason_in_the_ledger() {
    let w = world();
    let transport = ScriptedTransport::new();
    let wrong_key =
        outboxkit_core::AeadVault::new(&[7u8; 32], Arc::new(outboxkit_core::OsEntropy)).unwrap();
    let d = w
        .builder()
        .webhooks(Arc::new(transport.clone()), Arc::new(wrong_key))
        .build()
        .unwrap();
    w.endpoint("https://hooks.example/x").await;
    w.store
        .enqueue(NewMessage::new(
            "order.created",
            serde_json::json!({"id": 1}),
        ))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.claimed, r.parked), (1, 1));
    assert_eq!(transport.count(), 0, "nothing is sent without the secret");
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Pending, 0));
    let ledger = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        ledger[0].record.outcome,
        AttemptOutcome::Failed(ErrorClass::SecretUnavailable)
    );
    let why = ledger[0].record.excerpt.as_deref().unwrap_or_default();
    assert!(why.contains("vault key"), "{why}");
}

/// `EndpointAdmin` checks filters against the event-type catalogue at create and at a filter
/// update when the mode is not off: an unregistered exact topic, or a `prefix.*` that matches
/// no registered type, is `InvalidInput` naming it, and nothing is written.
#[tokio::test]
async fn endpoint_filters_are_checked_against_the_catalogue() {
    use outboxkit_core::{CatalogueMode, ErrorKind, NewEventType, Topic, TopicFilter};
    let w = world();
    let new = |filter: &str| outboxkit_dispatch::NewEndpoint {
        url: "https://hooks.example/x".into(),
        filter: filter.into(),
        ..Default::default()
    };
    // Off: any filter.
    let (free, _) = w.admin.create(&w.tenant, new("order.paid")).await.unwrap();
    let t = NewEventType::new(Topic::new("order.created").unwrap(), "");
    w.store.put_event_type(&t).await.unwrap();
    w.store
        .set_catalogue_mode(CatalogueMode::RefuseUnknown)
        .await
        .unwrap();
    for bad in ["order.paid", "invoice.*", "order.created,x.y"] {
        let e = w.admin.create(&w.tenant, new(bad)).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (ErrorKind::InvalidInput, Some("filter")),
            "{bad}"
        );
        let first = bad.split(',').find(|p| *p != "order.created").unwrap();
        assert!(e.message().contains(first), "{bad}: {e}");
    }
    assert_eq!(w.store.list_endpoints(&w.tenant).await.unwrap().len(), 1);
    for ok in ["*", "order.created", "order.*"] {
        w.admin.create(&w.tenant, new(ok)).await.unwrap();
    }
    let change = |f: &str| outboxkit_core::EndpointUpdate {
        filter: Some(TopicFilter::parse(f).unwrap()),
        ..Default::default()
    };
    let e = w
        .admin
        .update(&w.tenant, free.id, change("billing.*"))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("filter"));
    let kept = w.store.get_endpoint(&w.tenant, free.id).await.unwrap();
    assert_eq!(kept.filter.to_string(), "order.paid");
    w.admin
        .update(&w.tenant, free.id, change("order.*"))
        .await
        .unwrap();
}
