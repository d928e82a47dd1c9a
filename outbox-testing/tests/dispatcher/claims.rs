//! Claims side by side: a store that runs claims in parallel gets several in flight, only
//! one of them asks for webhooks, and what is still out when a run ends goes back.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{DeliveryId, DeliveryStatus, Message};
use outboxkit_dispatch::{Context, HandlerResult};

use crate::doubling::{Doubling, Parallel};
use crate::{until, world, BUDGET};

/// A dispatcher on a store with claims of `parallel` in flight at once: `n` handler messages
/// (and, with `webhooks`, the same messages to two endpoints) delivered with a batch of 10;
/// the store's counts and what each handler and endpoint saw.
async fn run_with_parallel_claims(parallel: usize, n: usize, webhooks: bool) -> Arc<Doubling> {
    let w = world();
    let store = Arc::new(Doubling(
        w.store.clone(),
        false,
        Default::default(),
        None,
        Parallel::new(parallel),
    ));
    let calls = Arc::new(Mutex::new(HashMap::<DeliveryId, usize>::new()));
    let c2 = calls.clone();
    let transport = outboxkit_testing::ScriptedTransport::new();
    let mut builder = outboxkit_dispatch::Dispatcher::builder(store.clone())
        .clock(w.clock.clone())
        .config(outboxkit_dispatch::DispatcherConfig {
            batch_size: 10,
            concurrency: 20,
            handler_concurrency: 100,
            endpoint_concurrency: Some(3),
            ..Default::default()
        })
        .handler("h", "*", move |c: Context, _m: Message| {
            let calls = c2.clone();
            async move {
                *calls.lock().unwrap().entry(c.delivery_id()).or_default() += 1;
                HandlerResult::Ok
            }
        });
    if webhooks {
        builder = builder.webhooks(
            Arc::new(transport.clone()),
            Arc::new(outboxkit_core::PlaintextVault),
        );
        w.endpoint("https://hooks.example/a").await;
        w.endpoint("https://hooks.example/b").await;
    }
    let d = builder.build().unwrap();
    d.register().await.unwrap();
    w.enqueue_n(n).await;
    let r = d.run_once(BUDGET).await.unwrap();
    let each = if webhooks { 3 } else { 1 };
    assert_eq!(r.succeeded, (n * each) as u64, "{r}");
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, n * each);
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), n, "every handler delivery ran");
    assert!(calls.values().all(|c| *c == 1), "and ran once");
    if webhooks {
        assert_eq!(
            transport.count(),
            2 * n,
            "every webhook delivery was sent once"
        );
    }
    store
}

#[tokio::test]
async fn claims_overlap_where_the_store_runs_them_side_by_side() {
    let store = run_with_parallel_claims(2, 200, false).await;
    let p = store.4.as_ref().unwrap();
    assert_eq!(
        p.most.load(Ordering::SeqCst),
        2,
        "two claims were in flight at once"
    );
}

#[tokio::test]
async fn after_a_short_answer_claims_go_one_at_a_time() {
    // Five messages and claims of up to 10: the first claim takes them all and comes back
    // short, so no second claim races it, and the empty ones after it go out alone.
    let store = run_with_parallel_claims(2, 5, false).await;
    let p = store.4.as_ref().unwrap();
    assert_eq!(p.most.load(Ordering::SeqCst), 1);
    assert!(
        p.calls.load(Ordering::SeqCst) >= 2,
        "claimed again after the short answer"
    );
}

#[tokio::test]
async fn one_claim_at_a_time_where_the_store_says_so() {
    let store = run_with_parallel_claims(1, 200, false).await;
    let p = store.4.as_ref().unwrap();
    assert_eq!(p.most.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn only_one_claim_in_flight_asks_for_webhooks() {
    // The per-endpoint cap counts what the run holds: a second claim asking for webhooks
    // could not know what the first brings back.
    let store = run_with_parallel_claims(2, 60, true).await;
    let p = store.4.as_ref().unwrap();
    assert_eq!(p.most.load(Ordering::SeqCst), 2, "claims overlapped");
    assert_eq!(p.wide_most.load(Ordering::SeqCst), 1);
    let per = p.per_endpoint.lock().unwrap();
    assert_eq!(per.len(), 2);
    assert!(per.values().all(|n| *n == 60), "{per:?}");
}

#[tokio::test]
async fn the_end_of_a_run_hands_back_what_a_claim_in_flight_brings() {
    let w = world();
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let store = Arc::new(Doubling(
        w.store.clone(),
        false,
        Default::default(),
        None,
        Some(Parallel {
            parallel: 2,
            hold: Some(hold.clone()),
            ..Parallel::default()
        }),
    ));
    let d = outboxkit_dispatch::Dispatcher::builder(store.clone())
        .clock(w.clock.clone())
        .config(outboxkit_dispatch::DispatcherConfig {
            batch_size: 10,
            concurrency: 20,
            ..Default::default()
        })
        .handler("h", "*", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(50).await;
    let run = tokio::spawn({
        let d = d.clone();
        async move { d.run_once(BUDGET).await }
    });
    let p = store.4.as_ref().unwrap();
    // The first claim goes out alone; its full answer sends the next two side by side.
    until(|| p.in_flight.load(Ordering::SeqCst) == 1).await;
    hold.add_permits(1);
    until(|| p.in_flight.load(Ordering::SeqCst) == 2).await;
    // The budget is spent while both claims are in flight: the run ends when the first
    // returns, with the second still out.
    w.advance(BUDGET + Duration::from_secs(1));
    hold.add_permits(2);
    let r = run.await.unwrap().unwrap();
    assert_eq!(r.claimed, 30, "{r}");
    assert_eq!(r.succeeded + r.released, 30, "{r}");
    assert!(
        r.released >= 10,
        "the claim still in flight was handed back: {r}"
    );
    assert_eq!(w.count(DeliveryStatus::Succeeded).await as u64, r.succeeded);
    assert_eq!(
        w.count(DeliveryStatus::Processing).await,
        0,
        "no lease is left behind"
    );
    let pending: Vec<_> = w
        .deliveries()
        .await
        .into_iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .collect();
    assert_eq!(pending.len() as u64, 50 - r.succeeded);
    assert!(pending.iter().all(|d| d.attempts == 0), "attempts refunded");
}

/// A transport whose sends wait at a gate (one permit each) and counts the waiting ones.
#[derive(Debug)]
struct Gated {
    gate: Arc<tokio::sync::Semaphore>,
    waiting: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl outboxkit_core::WebhookTransport for Gated {
    async fn send(&self, _r: outboxkit_core::SignedRequest) -> outboxkit_core::WebhookResponse {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.expect("never closed").forget();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        outboxkit_core::WebhookResponse::answered(200, None, "")
    }
}

#[tokio::test]
async fn an_empty_claim_sent_while_an_endpoint_was_full_does_not_end_the_run() {
    // The endpoint is at its cap when the second claim is sent, so that claim asks for
    // nothing of it and comes back empty; meanwhile its deliveries finish and are written.
    // That empty answer is stale: `run_once` asks again instead of reporting itself drained.
    let w = world();
    let hold = Arc::new(tokio::sync::Semaphore::new(1));
    let store = Arc::new(Doubling(
        w.store.clone(),
        false,
        Default::default(),
        None,
        Some(Parallel {
            parallel: 1,
            hold: Some(hold.clone()),
            ..Parallel::default()
        }),
    ));
    let transport = Arc::new(Gated {
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
        waiting: Default::default(),
    });
    let d = outboxkit_dispatch::Dispatcher::builder(store.clone())
        .clock(w.clock.clone())
        .config(outboxkit_dispatch::DispatcherConfig {
            batch_size: 10,
            concurrency: 10,
            endpoint_concurrency: Some(2),
            ..Default::default()
        })
        .webhooks(transport.clone(), Arc::new(outboxkit_core::PlaintextVault))
        .build()
        .unwrap();
    w.endpoint("https://hooks.example/a").await;
    d.register().await.unwrap();
    w.enqueue_n(6).await;
    let run = tokio::spawn({
        let d = d.clone();
        async move { d.run_once(BUDGET).await }
    });
    let p = store.4.as_ref().unwrap();
    // The first claim took the endpoint's two; the second is out, waiting at the hold.
    until(|| transport.waiting.load(Ordering::SeqCst) == 2).await;
    until(|| p.in_flight.load(Ordering::SeqCst) == 1).await;
    // The two finish and are written while that claim is out.
    transport.gate.add_permits(2);
    for _ in 0..1000 {
        if w.count(DeliveryStatus::Succeeded).await == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 2);
    // Let the loop take in the written batch before the empty claim returns.
    tokio::time::sleep(Duration::from_millis(50)).await;
    transport.gate.add_permits(100);
    hold.add_permits(100);
    let r = run.await.unwrap().unwrap();
    assert_eq!(r.succeeded, 6, "{r}");
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 6);
}
