//! Long-running handlers: the heartbeat that extends their leases, a lost lease cancelling
//! the handler, and `Context::cancellation` at shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{ClaimRequest, ConsumerName, DeliveryStatus, Message, Timestamp};
use outboxkit_dispatch::{Context, DispatcherConfig, HandlerOptions, HandlerResult};

use crate::{spawn_run, until, world, BUDGET};

/// Which handler calls started (payload `i`), and how each ended (`true`: cancelled).
type Calls = Arc<Mutex<Vec<(u64, Option<bool>)>>>;

/// A handler that runs until `go` is notified or its context is cancelled.
fn slow(calls: Calls, go: Arc<tokio::sync::Notify>) -> impl outboxkit_dispatch::Handler {
    move |ctx: Context, m: Message| {
        let (calls, go) = (calls.clone(), go.clone());
        async move {
            let i = m.json().unwrap()["i"].as_u64().unwrap();
            calls.lock().unwrap().push((i, None));
            let cancelled = tokio::select! {
                () = go.notified() => false,
                () = ctx.cancellation().cancelled() => true,
            };
            if let Some(c) = calls.lock().unwrap().iter_mut().find(|c| c.0 == i) {
                c.1 = Some(cancelled);
            }
            if cancelled {
                HandlerResult::retry("stopped")
            } else {
                HandlerResult::Ok
            }
        }
    }
}

/// `secs` after the start of every test's clock.
fn at(secs: u64) -> Timestamp {
    Timestamp::from_unix_millis_clamped(outboxkit_testing::ManualClock::START)
        .saturating_add(Duration::from_secs(secs))
}

#[tokio::test]
async fn long_handlers_keep_their_leases_and_a_lost_lease_cancels_the_handler() {
    let w = world();
    let calls: Calls = Arc::default();
    let go = Arc::new(tokio::sync::Notify::new());
    let d = w
        .builder()
        .config(DispatcherConfig {
            lease: Duration::from_secs(30),
            webhook_timeout: Duration::from_secs(5),
            mail_timeout: Some(Duration::from_secs(5)),
            poll_interval: Duration::from_millis(50),
            ..DispatcherConfig::default()
        })
        .handler_with(
            "slow",
            "*",
            slow(calls.clone(), go.clone()),
            HandlerOptions {
                timeout: Duration::from_secs(20),
                concurrency: Some(1),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(3).await;
    // t0: all three are claimed with leases to t30; #0 runs, #1 and #2 wait for the permit.
    let run = tokio::spawn({
        let d = d.clone();
        async move { d.run_once(BUDGET).await.unwrap() }
    });
    until(|| calls.lock().unwrap().len() == 1).await;
    // t19: #0 ends; #1 starts with 11 s of lease left.
    w.advance(Duration::from_secs(19));
    go.notify_one();
    until(|| calls.lock().unwrap().len() == 2).await;
    // t21: a third of #1's lease is left; its heartbeat extends it to t51.
    w.advance(Duration::from_secs(2));
    let extended_to = at(51);
    let mut extended = false;
    for _ in 0..1000 {
        if w.deliveries()
            .await
            .iter()
            .any(|d| d.next_attempt_at == extended_to)
        {
            extended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(extended, "the running handler's lease was extended");
    // t31: #2's lease, never started, has run out; another worker takes it. #1's has not.
    w.advance(Duration::from_secs(10));
    let stolen = w
        .store
        .claim(
            &ClaimRequest::new(10, Duration::from_secs(30))
                .handler(ConsumerName::new("slow").unwrap(), 8),
        )
        .await
        .unwrap();
    assert_eq!(stolen.len(), 1, "only the unstarted delivery was free");
    // #1 ends; #2 starts, its heartbeat finds the lease lost and cancels it.
    go.notify_one();
    let r = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the handler whose lease was lost was never cancelled")
        .unwrap();
    assert_eq!((r.succeeded, r.lease_lost), (2, 1), "{r}");
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        vec![(0, Some(false)), (1, Some(false)), (2, Some(true))]
    );
    let taken = w
        .store
        .get_delivery(&w.tenant, stolen[0].delivery.id)
        .await
        .unwrap();
    assert_eq!(
        taken.status,
        DeliveryStatus::Processing,
        "nothing was written over the other worker's claim"
    );
}

#[tokio::test]
async fn shutdown_cancels_running_handlers_and_refunds_their_attempt() {
    let w = world();
    let cancelled = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let (c, s) = (cancelled.clone(), started.clone());
    let d = w
        .builder()
        .handler("stoppable", "*", move |ctx: Context, _m: Message| {
            let (c, s) = (c.clone(), s.clone());
            async move {
                s.notify_one();
                ctx.cancellation().cancelled().await;
                c.store(true, Ordering::SeqCst);
                HandlerResult::retry("stopped by the shutdown")
            }
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(1).await;
    let (tx, run) = spawn_run(&d);
    started.notified().await;
    tx.send(()).unwrap();
    // Time moves only to end the grace period: a handler that did not hear the shutdown
    // would be aborted then, never having seen its context cancelled.
    while !run.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.advance(Duration::from_secs(1));
    }
    let r = run.await.unwrap();
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the handler saw its context cancelled"
    );
    assert_eq!(r.released, 1, "{r}");
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Pending, 0));
}

/// Deliveries claimed ahead of free slots wait with their leases running: one whose lease no
/// longer covers its timeout plus the reservation margin goes back unstarted (attempt
/// refunded) and runs on a fresh claim.
#[tokio::test]
async fn a_delivery_claimed_ahead_never_starts_on_a_lease_too_short_for_it() {
    let w = world();
    let calls: Calls = Arc::default();
    let go = Arc::new(tokio::sync::Notify::new());
    let d = w
        .builder()
        .config(DispatcherConfig {
            concurrency: 1,
            lease: Duration::from_secs(60),
            reservation_margin: Duration::from_secs(2),
            poll_interval: Duration::from_millis(20),
            ..DispatcherConfig::default()
        })
        .handler_with(
            "slow",
            "*",
            slow(calls.clone(), go.clone()),
            HandlerOptions {
                timeout: Duration::from_secs(30),
                concurrency: Some(1),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(2).await;
    let (tx, run) = spawn_run(&d);
    until(|| calls.lock().unwrap().len() == 1).await;
    // Both were claimed together: the second waits for the only slot.
    assert_eq!(w.count(DeliveryStatus::Processing).await, 2);
    // 29 s later only 31 s of its lease are left, less than 30 s + the 2 s margin (the
    // first handler is still within its 30 s timeout).
    w.advance(Duration::from_secs(29));
    tokio::time::sleep(Duration::from_millis(50)).await;
    go.notify_one();
    until(|| calls.lock().unwrap().len() == 2).await;
    go.notify_one();
    until(|| calls.lock().unwrap().iter().all(|c| c.1 == Some(false))).await;
    tx.send(()).unwrap();
    let report = run.await.unwrap();
    assert_eq!(report.succeeded, 2, "{report}");
    assert!(report.released >= 1, "the second went back once: {report}");
    for del in w.deliveries().await {
        assert_eq!(
            (del.status, del.attempts),
            (DeliveryStatus::Succeeded, 1),
            "the release refunded its attempt"
        );
    }
}
