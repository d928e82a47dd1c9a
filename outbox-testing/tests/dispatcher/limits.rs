//! Per-endpoint rate limits and concurrency, against real loopback receivers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    DeliveryStatus, NewMessage, PlaintextVault, SignedRequest, WebhookResponse, WebhookTransport,
};
use outboxkit_dispatch::{DispatcherConfig, NewEndpoint};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::{Reply, WebhookReceiver};

use crate::{spawn_run, world, World};

fn loopback() -> HttpTransport {
    HttpTransport::new(
        EgressPolicy::default()
            .allow_http(true)
            .allow_cidr("127.0.0.0/8")
            .unwrap(),
    )
    .unwrap()
}

/// Run `d` until `done` holds, moving the clock by `step` only while no delivery is being
/// processed, so every request is recorded at the clock time the dispatcher sent it.
async fn drive(
    w: &World,
    d: &outboxkit_dispatch::Dispatcher,
    step: Duration,
    done: impl Fn() -> bool,
) -> outboxkit_dispatch::Report {
    let (tx, run) = spawn_run(d);
    for _ in 0..20_000 {
        if done() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        if w.count(DeliveryStatus::Processing).await == 0 {
            w.advance(step);
        }
    }
    assert!(done(), "the deliveries were not all made");
    tx.send(()).unwrap();
    w.advance(Duration::from_secs(11));
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap()
}

/// No one-second window of `times` holds more than `limit`.
fn at_most_per_second(times: &[outboxkit_core::Timestamp], limit: usize) {
    for start in times {
        let end = start.saturating_add(Duration::from_secs(1));
        let in_window = times.iter().filter(|t| *t >= start && *t < &end).count();
        assert!(
            in_window <= limit,
            "{in_window} requests in the second from {start}"
        );
    }
}

/// Every delivery succeeded on its first and only attempt.
async fn all_delivered_once(w: &World, n: usize) {
    let all = w.deliveries().await;
    assert_eq!(all.len(), n);
    for del in all {
        assert_eq!(
            (del.status, del.attempts),
            (DeliveryStatus::Succeeded, 1),
            "nothing lost, nothing charged for waiting"
        );
        assert_eq!(w.store.attempts(&w.tenant, del.id).await.unwrap().len(), 1);
    }
}

/// A loopback receiver on the world's clock behind an endpoint limited to `per_second`.
async fn rate_limited_receiver(w: &World, per_second: u32) -> WebhookReceiver {
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    w.admin
        .create(
            &w.tenant,
            NewEndpoint {
                url: receiver.url(),
                rate_limit: Some(per_second),
                ..NewEndpoint::default()
            },
        )
        .await
        .unwrap();
    receiver
}

/// Two dispatchers on one store share the endpoint's rate (the store's permits): each alone
/// would let 5 a second through, together they still send 5, not 10.
#[tokio::test]
async fn two_dispatchers_share_an_endpoints_rate_limit() {
    let w = world();
    let receiver = rate_limited_receiver(&w, 5).await;
    // Each holds at most 4 of the endpoint's deliveries, so neither can take them all.
    let capped = || {
        w.builder()
            .config(DispatcherConfig {
                poll_interval: Duration::from_millis(50),
                endpoint_concurrency: Some(4),
                ..DispatcherConfig::default()
            })
            .webhooks(Arc::new(loopback()), Arc::new(PlaintextVault))
            .build()
            .unwrap()
    };
    let (a, b) = (capped(), capped());
    const N: usize = 23;
    w.enqueue_n(N).await;
    let (stop_b, run_b) = spawn_run(&b);
    let r = drive(&w, &a, Duration::from_millis(100), || receiver.count() >= N).await;
    stop_b.send(()).unwrap();
    let rb = tokio::time::timeout(Duration::from_secs(10), run_b)
        .await
        .unwrap()
        .unwrap();
    assert!(r.succeeded > 0 && rb.succeeded > 0, "both sent: {r} / {rb}");
    assert!(r.released + rb.released > 0, "some waited: {r} / {rb}");
    let times: Vec<_> = receiver.requests().iter().map(|q| q.at).collect();
    assert_eq!(times.len(), N, "each delivery was sent once");
    at_most_per_second(&times, 5);
    all_delivered_once(&w, N).await;
}

/// A permit call that fails sends nothing (fail closed) and loses nothing: the deliveries
/// wait, unspent, and go when the store answers again.
#[tokio::test]
async fn a_failing_permit_call_sends_nothing_and_loses_nothing() {
    let w = world();
    let faulty = Arc::new(
        outboxkit_testing::FaultyStore::new(w.store.clone(), 1).fail_first("take_permits", 3),
    );
    let w = World {
        store: faulty.clone(),
        ..w
    };
    let receiver = rate_limited_receiver(&w, 5).await;
    let d = w.webhook_dispatcher(Arc::new(loopback()));
    const N: usize = 12;
    w.enqueue_n(N).await;
    let r = drive(&w, &d, Duration::from_millis(100), || receiver.count() >= N).await;
    assert_eq!(faulty.injected(), 3, "the first three permit calls failed");
    assert!(r.released > 0, "the refused deliveries went back: {r}");
    let times: Vec<_> = receiver.requests().iter().map(|q| q.at).collect();
    assert_eq!(times.len(), N, "each delivery was sent once");
    at_most_per_second(&times, 5);
    all_delivered_once(&w, N).await;
}

/// The permits of a claim batch's deliveries to one endpoint are taken in one call, not one
/// round trip per request.
#[tokio::test]
async fn permits_are_taken_per_batch_not_per_request() {
    let w = world();
    let counting = Arc::new(outboxkit_testing::FaultyStore::new(w.store.clone(), 1));
    let w = World {
        store: counting.clone(),
        ..w
    };
    let receiver = rate_limited_receiver(&w, 1_000).await;
    let d = w.webhook_dispatcher(Arc::new(loopback()));
    const N: usize = 40;
    w.enqueue_n(N).await;
    let r = drive(&w, &d, Duration::from_millis(100), || receiver.count() >= N).await;
    let calls = counting.calls_to("take_permits");
    assert!(
        calls > 0 && calls <= r.batches && calls < N as u64,
        "{calls} permit calls for {N} deliveries in {} claim batches: {r}",
        r.batches
    );
    all_delivered_once(&w, N).await;
}

#[tokio::test]
async fn a_rate_limited_endpoint_never_gets_more_than_its_limit_in_any_second() {
    let w = world();
    let receiver = rate_limited_receiver(&w, 5).await;
    let d = w.webhook_dispatcher(Arc::new(loopback()));
    const N: usize = 23;
    w.enqueue_n(N).await;
    let r = drive(&w, &d, Duration::from_millis(100), || receiver.count() >= N).await;
    assert!(r.released > 0, "deliveries over the limit waited: {r}");
    let times: Vec<_> = receiver.requests().iter().map(|q| q.at).collect();
    assert_eq!(times.len(), N, "each delivery was sent once");
    for start in &times {
        let end = start.saturating_add(Duration::from_secs(1));
        let in_window = times.iter().filter(|t| *t >= start && *t < &end).count();
        assert!(
            in_window <= 5,
            "{in_window} requests in the second from {start}"
        );
    }
    all_delivered_once(&w, N).await;
}

/// A transport that counts requests in flight per URL path around a real `HttpTransport`.
#[derive(Debug, Default)]
struct Counting {
    inner: Option<HttpTransport>,
    now: Mutex<HashMap<String, usize>>,
    max: Mutex<HashMap<String, usize>>,
    total: AtomicUsize,
}

#[async_trait]
impl WebhookTransport for Counting {
    async fn send(&self, request: SignedRequest) -> WebhookResponse {
        let path = request.url.url().path().to_owned();
        {
            let mut now = self.now.lock().unwrap();
            let n = now.entry(path.clone()).or_default();
            *n += 1;
            let mut max = self.max.lock().unwrap();
            let m = max.entry(path.clone()).or_default();
            *m = (*m).max(*n);
        }
        let r = self.inner.as_ref().unwrap().send(request).await;
        *self.now.lock().unwrap().get_mut(&path).unwrap() -= 1;
        self.total.fetch_add(1, Ordering::SeqCst);
        r
    }
}

#[tokio::test]
async fn per_endpoint_concurrency_has_a_default_and_overrides() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    // Every answer takes a while, so requests to one endpoint would overlap.
    receiver.script((0..40).map(|_| Reply::Delay(Duration::from_millis(30), 200)));
    let mut ids = Vec::new();
    for path in ["/wide", "/narrow"] {
        let (e, _) = w
            .admin
            .create(
                &w.tenant,
                NewEndpoint {
                    url: receiver.url_for(path),
                    ..NewEndpoint::default()
                },
            )
            .await
            .unwrap();
        ids.push(e.id);
    }
    let transport = Arc::new(Counting {
        inner: Some(loopback()),
        ..Counting::default()
    });
    let d = w
        .builder()
        .config(DispatcherConfig {
            poll_interval: Duration::from_millis(50),
            endpoint_concurrency: Some(2),
            endpoint_concurrency_overrides: [(ids[1], 1)].into_iter().collect(),
            ..DispatcherConfig::default()
        })
        .webhooks(transport.clone(), Arc::new(PlaintextVault))
        .build()
        .unwrap();
    for i in 0..6 {
        w.store
            .enqueue(NewMessage::new("a.b", serde_json::json!({ "i": i })))
            .await
            .unwrap();
    }
    drive(&w, &d, Duration::from_millis(50), || {
        transport.total.load(Ordering::SeqCst) >= 12
    })
    .await;
    let max = transport.max.lock().unwrap().clone();
    assert_eq!(max.get("/wide"), Some(&2), "{max:?}");
    assert_eq!(max.get("/narrow"), Some(&1), "{max:?}");
    all_delivered_once(&w, 12).await;
}

#[test]
fn a_zero_endpoint_concurrency_is_refused_by_name() {
    let config = DispatcherConfig {
        endpoint_concurrency: Some(0),
        ..DispatcherConfig::default()
    };
    assert_eq!(
        config.validate().unwrap_err().field(),
        Some("endpoint_concurrency")
    );
    let config = DispatcherConfig {
        endpoint_concurrency_overrides: [(
            outboxkit_core::EndpointId::parse("01900000-0000-7000-8000-0000000000aa").unwrap(),
            0,
        )]
        .into_iter()
        .collect(),
        ..DispatcherConfig::default()
    };
    assert_eq!(
        config.validate().unwrap_err().field(),
        Some("endpoint_concurrency_overrides")
    );
}

/// `run_once` waits out a rate limit even when writing the release takes store time: it
/// waits for the due time the store wrote, not the one computed before the write, so it
/// does not end with deliveries due a moment later (the CLI's `relay --until-idle` once
/// did, 5 of 12 sent).
#[tokio::test]
async fn run_once_waits_for_the_due_time_the_release_wrote() {
    let w = world();
    let slow = outboxkit_testing::FaultyStore::new(w.store.clone(), 1).slow_on(
        "release",
        w.clock.clone(),
        Duration::from_millis(500),
    );
    let w = World {
        store: Arc::new(slow),
        ..w
    };
    let receiver = rate_limited_receiver(&w, 5).await;
    let d = w.webhook_dispatcher(Arc::new(loopback()));
    const N: usize = 12;
    w.enqueue_n(N).await;
    let run = {
        let d = d.clone();
        tokio::spawn(async move { d.run_once(crate::BUDGET).await.unwrap() })
    };
    for _ in 0..20_000 {
        if run.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        if w.count(DeliveryStatus::Processing).await == 0 {
            w.advance(Duration::from_millis(100));
        }
    }
    let r = run.await.unwrap();
    assert!(r.released > 0, "deliveries over the limit waited: {r}");
    assert_eq!(r.succeeded, N as u64, "{r}");
    assert_eq!(receiver.count(), N);
    all_delivered_once(&w, N).await;
}
