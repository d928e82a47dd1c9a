//! Isolation between endpoints: the default per-endpoint cap and the circuit breaker,
//! against real loopback receivers that hang and then recover.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{AttemptOutcome, Clock, DeliveryStatus, ErrorClass, PlaintextVault};
use outboxkit_dispatch::{CircuitState, Dispatcher, DispatcherConfig, NewEndpoint};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::{Reply, WebhookReceiver};

use crate::{spawn_run, world, World};

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

/// A receiver that holds every request open for a minute (the client gives up first).
fn hang(r: &WebhookReceiver, n: usize) {
    r.script((0..n).map(|_| Reply::Delay(Duration::from_secs(60), 200)));
}

/// Breaker settings small enough for a test: 3 failures, 10 s cool-down (manual clock), a
/// 200 ms real webhook deadline, one request at a time per endpoint.
fn config() -> DispatcherConfig {
    DispatcherConfig {
        poll_interval: Duration::from_millis(20),
        webhook_timeout: Duration::from_millis(200),
        endpoint_concurrency: Some(1),
        breaker_threshold: Some(3),
        breaker_cooldown: Duration::from_secs(10),
        breaker_max_cooldown: Duration::from_secs(40),
        ..DispatcherConfig::default()
    }
}

fn dispatcher(w: &World, config: DispatcherConfig) -> Dispatcher {
    w.builder()
        .config(config)
        .webhooks(loopback(), Arc::new(PlaintextVault))
        .build()
        .unwrap()
}

/// Wait (real time) until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting: {what}");
}

/// Attempts spent on deliveries, as the store has them.
async fn spent(w: &World) -> u32 {
    w.deliveries().await.iter().map(|d| d.attempts).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_endpoint_opens_its_circuit_then_one_probe_decides_and_recovery_closes_it() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    // Three timeouts open the circuit, the first probe hangs too; then the receiver is back.
    hang(&receiver, 4);
    let (e, _) = w.endpoint(&receiver.url()).await;
    w.enqueue_n(10).await;
    let d = dispatcher(&w, config());
    let (tx, run) = spawn_run(&d);

    until("the circuit opens", || {
        matches!(d.circuit(e), CircuitState::Open { .. })
    })
    .await;
    let opened_at = w.clock.now();
    assert_eq!(
        d.circuit(e),
        CircuitState::Open {
            until: opened_at.saturating_add(Duration::from_secs(10))
        }
    );
    // While open nothing else is sent and no attempt is spent, however long we wait.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(receiver.count(), 3, "three requests, then the circuit held");
    assert_eq!(spent(&w).await, 3);
    assert_eq!(w.count(DeliveryStatus::Pending).await, 10);

    // The cool-down ends: exactly one probe goes, and it hangs: open again, twice as long.
    w.advance(Duration::from_secs(10));
    until("the probe is sent", || receiver.count() == 4).await;
    until("the failed probe reopens the circuit", || {
        d.circuit(e)
            == CircuitState::Open {
                until: opened_at.saturating_add(Duration::from_secs(30)),
            }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.count(), 4, "one probe while half-open");
    assert_eq!(spent(&w).await, 4);

    // The receiver answers again: the next probe closes the circuit and the rest flows.
    w.advance(Duration::from_secs(20));
    until("the probe closes the circuit", || {
        d.circuit(e) == CircuitState::Closed
    })
    .await;
    // Those that met the probe in flight were put back for one poll interval.
    w.advance(Duration::from_secs(1));
    until("the six never tried are delivered", || {
        receiver.count() >= 10
    })
    .await;
    // The four that failed are due after their retry delay.
    w.advance(Duration::from_secs(3600));
    until("the retried four are delivered", || receiver.count() >= 14).await;
    for _ in 0..1000 {
        if w.count(DeliveryStatus::Succeeded).await == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 10);
    assert_eq!(receiver.count(), 14, "nothing sent twice");

    tx.send(()).unwrap();
    let report = run.await.unwrap();
    assert_eq!(report.circuits_opened, 2, "{report}");
    assert_eq!(report.circuits_closed, 1, "{report}");
    assert!(report.circuits.is_empty(), "{:?}", report.circuits);
    // Four timeouts in the ledger, every other attempt one success: 4 failed + 10 ok.
    let mut timeouts = 0;
    for del in w.deliveries().await {
        for a in w.store.attempts(&w.tenant, del.id).await.unwrap() {
            if a.record.outcome == AttemptOutcome::Failed(ErrorClass::Timeout) {
                timeouts += 1;
            }
        }
    }
    assert_eq!(timeouts, 4);
    assert_eq!(spent(&w).await, 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_rebuilds_the_circuit_from_the_last_delivery_and_sends_a_single_probe() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    hang(&receiver, 1);
    let (e, _) = w.endpoint(&receiver.url()).await;
    w.enqueue_n(1).await;
    // A first relay: one timeout (below the threshold), then it stops.
    let first = dispatcher(&w, config());
    let r = first.run_once(crate::BUDGET).await.unwrap();
    assert_eq!((r.retried, r.circuits_opened), (1, 0), "{r}");
    assert_eq!(first.circuit(e), CircuitState::Closed);

    // A new relay sees the endpoint's last delivery timed out: its first delivery is a
    // single probe, and that probe failing opens the circuit at once.
    hang(&receiver, 1);
    w.enqueue_n(5).await;
    let second = dispatcher(
        &w,
        DispatcherConfig {
            endpoint_concurrency: Some(4),
            ..config()
        },
    );
    let (tx, run) = spawn_run(&second);
    until("the probe reopens the circuit", || {
        matches!(second.circuit(e), CircuitState::Open { .. })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        receiver.count(),
        2,
        "one request before the restart, one probe"
    );
    tx.send(()).unwrap();
    let report = run.await.unwrap();
    assert_eq!(report.circuits_opened, 1, "{report}");
    assert!(matches!(
        report.circuits.get(&e),
        Some(CircuitState::Open { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_hanging_endpoint_holds_at_most_a_quarter_of_the_slots() {
    let w = world();
    let slow = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let healthy = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    hang(&slow, 100);
    for r in [&slow, &healthy] {
        w.admin
            .create(
                &w.tenant,
                NewEndpoint {
                    url: r.url(),
                    ..NewEndpoint::default()
                },
            )
            .await
            .unwrap();
    }
    w.enqueue_n(20).await;
    // Concurrency 8: the default cap is 2 per endpoint; the hanging one holds its two
    // slots for the whole deadline while the healthy one gets all of its deliveries.
    let d = dispatcher(
        &w,
        DispatcherConfig {
            concurrency: 8,
            endpoint_concurrency: None,
            webhook_timeout: Duration::from_secs(5),
            ..config()
        },
    );
    let (tx, run) = spawn_run(&d);
    until("the healthy endpoint has all 20", || healthy.count() >= 20).await;
    assert_eq!(
        slow.count(),
        2,
        "the hanging endpoint holds its cap, no more"
    );
    tx.send(()).unwrap();
    w.advance(Duration::from_secs(11));
    let report = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .unwrap()
        .unwrap();
    assert!(report.succeeded >= 20, "{report}");
}
