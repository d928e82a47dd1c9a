//! W3C trace context from enqueue to the handler's `Context` and, when the dispatcher opts
//! in, to the webhook receiver's request headers.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use outboxkit_core::{Message, NewMessage, PlaintextVault, Traceparent};
use outboxkit_dispatch::{Context, DispatcherConfig, HandlerResult};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::WebhookReceiver;

use crate::{world, BUDGET};

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

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

thread_local! {
    /// The "current span" of the trace source below: set only by the test that uses it, so
    /// the other tests of this binary (same process) build messages without a context.
    static CURRENT: Cell<Option<Traceparent>> = const { Cell::new(None) };
}

fn current_span_context() -> Option<Traceparent> {
    CURRENT.with(Cell::get)
}

#[tokio::test]
async fn one_message_carries_its_trace_to_the_handler_and_the_opted_in_webhook() {
    let w = world();
    let tp = Traceparent::parse(TP).unwrap();
    let forwarded = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let (_, secret) = w.endpoint(&forwarded.url()).await;
    forwarded.set_secrets(vec![secret]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let d = w
        .builder()
        .config(DispatcherConfig {
            forward_traceparent: true,
            ..DispatcherConfig::default()
        })
        .webhooks(loopback(), Arc::new(PlaintextVault))
        .handler("traced", "*", move |ctx: Context, _m: Message| {
            s.lock().unwrap().push(ctx.traceparent().copied());
            async { HandlerResult::Ok }
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("order.created", serde_json::json!({"id": 1})).traceparent(&tp))
        .await
        .unwrap();
    w.store
        .enqueue(NewMessage::new(
            "order.created",
            serde_json::json!({"id": 2}),
        ))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 4, "{r:?}");
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by_key(Option::is_none);
    assert_eq!(
        seen,
        vec![Some(tp), None],
        "the handler sees the producer's context"
    );
    let requests = forwarded.requests();
    assert_eq!(requests.len(), 2);
    let mut headers: Vec<Option<String>> = requests
        .iter()
        .map(|r| r.header("traceparent").map(str::to_owned))
        .collect();
    headers.sort_by_key(Option::is_none);
    assert_eq!(headers, vec![Some(TP.to_owned()), None]);
    assert!(
        requests.iter().all(|r| r.verified()),
        "the signature is unchanged"
    );
}

#[tokio::test]
async fn webhooks_get_no_traceparent_unless_the_dispatcher_opts_in() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let (_, secret) = w.endpoint(&receiver.url()).await;
    receiver.set_secrets(vec![secret]);
    w.store
        .enqueue(
            NewMessage::new("a.b", serde_json::json!({}))
                .traceparent(&Traceparent::parse(TP).unwrap()),
        )
        .await
        .unwrap();
    let r = w
        .webhook_dispatcher(loopback())
        .run_once(BUDGET)
        .await
        .unwrap();
    assert_eq!(r.succeeded, 1, "{r:?}");
    assert_eq!(receiver.requests()[0].header("traceparent"), None);
}

#[tokio::test(flavor = "current_thread")]
async fn the_installed_trace_source_stamps_new_messages() {
    outboxkit_core::set_trace_source(current_span_context);
    let tp = Traceparent::new([3; 16], [4; 8], 1).unwrap();
    CURRENT.with(|c| c.set(Some(tp)));
    let traced = NewMessage::new("a.b", serde_json::json!({}));
    let explicit = Traceparent::new([5; 16], [6; 8], 0).unwrap();
    let overridden = NewMessage::new("a.b", serde_json::json!({})).traceparent(&explicit);
    CURRENT.with(|c| c.set(None));
    let untraced = NewMessage::new("a.b", serde_json::json!({}));
    let w = world();
    let mut got = Vec::new();
    for m in [traced, overridden, untraced] {
        let id = w.store.enqueue(m).await.unwrap().message_id;
        let stored = w.store.get_message(&w.tenant, id).await.unwrap();
        got.push(Traceparent::from_headers(&stored.headers));
    }
    assert_eq!(got, vec![Some(tp), Some(explicit), None]);
}
