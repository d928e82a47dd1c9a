//! Budgets, shutdown, crashes, duplicates and observers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{DeliveryId, DeliveryStatus, Message, NewMessage};
use outboxkit_dispatch::{Context, DeliveryEvent, HandlerOptions, HandlerResult, Observer};

use crate::doubling::Doubling;
use crate::{spawn_run, until, world, BUDGET};

#[tokio::test]
async fn a_budget_releases_what_cannot_finish_in_time() {
    let w = world();
    let clock = w.clock.clone();
    let d = w
        .builder()
        .handler_with(
            "work",
            "*",
            move |_c: Context, _m: Message| {
                let clock = clock.clone();
                async move {
                    clock.advance(Duration::from_secs(10)); // ten seconds of work
                    HandlerResult::Ok
                }
            },
            HandlerOptions {
                timeout: Duration::from_secs(20),
                concurrency: Some(1),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(5).await;
    // 45 s: 20 s timeout + 2 s margin fits at 0, 10 and 20 s, not at 30 s.
    let r = d.run_once(Duration::from_secs(45)).await.unwrap();
    assert_eq!((r.succeeded, r.released), (3, 2), "{r}");
    assert_eq!(w.count(DeliveryStatus::Pending).await, 2);
    assert!(w
        .deliveries()
        .await
        .iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .all(|d| d.attempts == 0));
}

#[tokio::test]
async fn shutdown_releases_what_is_still_claimed() {
    let w = world();
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let d = w
        .builder()
        .handler_with(
            "stuck",
            "*",
            move |ctx: Context, _m: Message| {
                let s = s.clone();
                async move {
                    s.notify_one();
                    ctx.cancellation().cancelled().await;
                    // Stopped, not done: the attempt is refunded.
                    HandlerResult::retry("stopped")
                }
            },
            HandlerOptions {
                concurrency: Some(1),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(5).await;
    let (tx, run) = spawn_run(&d);
    started.notified().await;
    tx.send(()).unwrap();
    // The in-flight one gets the grace period; the four waiting go back at once.
    tokio::time::sleep(Duration::from_millis(50)).await;
    w.advance(Duration::from_secs(11));
    let r = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.released, 5, "{r}");
    for del in w.deliveries().await {
        assert_eq!((del.status, del.attempts), (DeliveryStatus::Pending, 0));
    }
}

#[tokio::test]
async fn after_a_crash_every_unfinished_delivery_runs_exactly_once_more() {
    let w = world();
    let gate = Arc::new(tokio::sync::Semaphore::new(3));
    let g = gate.clone();
    let first = w
        .builder()
        .handler("h", "*", move |_c: Context, _m: Message| {
            let g = g.clone();
            async move {
                // The first three finish; the rest hang until the process "dies".
                match g.try_acquire() {
                    Ok(p) => {
                        p.forget();
                        HandlerResult::Ok
                    }
                    Err(_) => std::future::pending().await,
                }
            }
        })
        .build()
        .unwrap();
    first.register().await.unwrap();
    w.enqueue_n(10).await;
    let crashed = tokio::spawn({
        let d = first.clone();
        async move { d.run(std::future::pending()).await }
    });
    while w.count(DeliveryStatus::Succeeded).await < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    crashed.abort(); // kill -9: nothing is released
    let _ = crashed.await;
    drop(first);
    assert_eq!(w.count(DeliveryStatus::Processing).await, 7);

    let runs: Arc<Mutex<HashMap<DeliveryId, u32>>> = Arc::default();
    let r2 = runs.clone();
    let second = w
        .builder()
        .handler("h", "*", move |ctx: Context, _m: Message| {
            let r2 = r2.clone();
            async move {
                *r2.lock().unwrap().entry(ctx.delivery_id()).or_default() += 1;
                HandlerResult::Ok
            }
        })
        .build()
        .unwrap();
    assert_eq!(
        second.run_once(BUDGET).await.unwrap().claimed,
        0,
        "leases are live"
    );
    w.advance(Duration::from_secs(41));
    let r = second.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 7);
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 7);
    assert!(runs.values().all(|n| *n == 1));
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 10);
}

#[tokio::test]
async fn a_delivery_handed_out_twice_runs_once() {
    let w = world();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let store: Arc<dyn outboxkit_core::Store> = Arc::new(Doubling(
        w.store.clone(),
        true,
        Default::default(),
        None,
        None,
    ));
    let d = outboxkit_dispatch::Dispatcher::builder(store)
        .clock(w.clock.clone())
        .handler("h", "*", move |_c: Context, _m: Message| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                HandlerResult::Ok
            }
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({})))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.duplicate_in_run, 1, "{r}");
    assert_eq!(r.succeeded, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[derive(Debug, Default)]
struct Panicky(AtomicU32);

impl Observer for Panicky {
    fn on_delivery(&self, _e: &DeliveryEvent<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("metrics backend down");
    }
}

#[tokio::test]
async fn a_failing_observer_changes_no_outcome_and_the_report_has_stats() {
    let w = world();
    let obs = Arc::new(Panicky::default());
    let d = w
        .builder()
        .observer(obs.clone())
        .handler("h", "*", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    for _ in 0..3 {
        w.store
            .enqueue(NewMessage::new("a.b", serde_json::json!({})))
            .await
            .unwrap();
    }
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 3);
    assert_eq!(obs.0.load(Ordering::SeqCst), 3);
    assert_eq!(r.per_topic.values().map(|t| t.succeeded).sum::<u64>(), 3);
    assert_eq!(r.stats.as_ref().map(|s| s.succeeded), Some(3));
}

#[test]
fn bad_dispatcher_configuration_is_an_error() {
    let w = world();
    assert!(w.builder().build().is_err(), "nothing to deliver");
    let e = w
        .builder()
        .handler("Bad Name", "*", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap_err();
    assert_eq!(e.field(), Some("handler"));
    let e = w
        .builder()
        .handler("ok", "not a filter!", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap_err();
    assert_eq!(e.field(), Some("handler.filter"));
}

/// With spare capacity and work always due, the loop never goes idle: it must still see the
/// shutdown signal. Claims are slowed down (2 ms each) so that, without that check, the loop
/// would claim and run all 2000 deliveries before noticing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_noticed_under_continuous_load() {
    let w = world();
    let handled = Arc::new(AtomicU32::new(0));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let h = handled.clone();
    let slow: Arc<dyn outboxkit_core::Store> = Arc::new(
        outboxkit_testing::FaultyStore::new(w.store.clone(), 1).latency(Duration::from_millis(2)),
    );
    let d = outboxkit_dispatch::Dispatcher::builder(slow)
        .clock(w.clock.clone())
        .handler("h", "*", move |_c: Context, _m: Message| {
            let (h, tx) = (h.clone(), tx.clone());
            async move {
                if h.fetch_add(1, Ordering::SeqCst) + 1 == 10 {
                    if let Some(tx) = tx.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                }
                HandlerResult::Ok
            }
        })
        .config(outboxkit_dispatch::DispatcherConfig {
            batch_size: 10,
            concurrency: 5000,
            ..Default::default()
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(2000).await;
    let run = d.run(async {
        let _ = rx.await;
    });
    let r = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert!(
        r.succeeded < 1000,
        "the run stopped while work was still due: {r}"
    );
    let stats = w.store.stats().await.unwrap();
    assert_eq!(stats.processing, 0, "nothing is left claimed");
    assert_eq!(
        (stats.succeeded, stats.succeeded + stats.pending),
        (r.succeeded, 2000)
    );
}

/// Completions wait to be handed to a write against the dispatcher's capacity (its
/// concurrency plus what it claims ahead), so a slow store never makes a completion batch (or
/// memory) grow past it. They hold no running slot: the next deliveries start while they are
/// written, and no more than `concurrency` handlers ever run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_batches_stay_within_the_capacity_and_handlers_within_the_concurrency() {
    let w = world();
    let slow = Arc::new(Doubling(
        w.store.clone(),
        false,
        Default::default(),
        None,
        None,
    ));
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r2, p2) = (running.clone(), peak.clone());
    let d = outboxkit_dispatch::Dispatcher::builder(slow.clone())
        .clock(w.clock.clone())
        .config(outboxkit_dispatch::DispatcherConfig {
            batch_size: 50,
            concurrency: 50,
            handler_concurrency: 200,
            ..Default::default()
        })
        .handler("h", "*", move |_c: Context, _m: Message| {
            let (running, peak) = (r2.clone(), p2.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                running.fetch_sub(1, Ordering::SeqCst);
                HandlerResult::Ok
            }
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(2000).await;
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 2000, "{r}");
    // Capacity: concurrency 50 plus 50 claimed ahead (the batch size).
    let largest = slow.2.load(Ordering::SeqCst);
    assert!(
        (1..=100).contains(&largest),
        "largest completion batch {largest}"
    );
    let peak = peak.load(Ordering::SeqCst);
    assert!((1..=50).contains(&peak), "{peak} handlers ran at once");
}

/// The write of one batch of completions does not hold back the next claim: while it waits
/// (the store's gate closed), the dispatcher claims and runs past its capacity — the
/// deliveries being written no longer count against it — and the next batch to write stays
/// within the capacity. Opened, everything completes once. (One thread: the first claim's
/// handlers all finish before the loop looks, so the first write holds all ten.)
#[tokio::test]
async fn the_next_claim_does_not_wait_for_a_completion_write() {
    let w = world();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let store = Arc::new(Doubling(
        w.store.clone(),
        false,
        Default::default(),
        Some(gate.clone()),
        None,
    ));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c2 = calls.clone();
    let d = outboxkit_dispatch::Dispatcher::builder(store.clone())
        .clock(w.clock.clone())
        .config(outboxkit_dispatch::DispatcherConfig {
            batch_size: 10,
            concurrency: 10,
            handler_concurrency: 100,
            ..Default::default()
        })
        .handler("h", "*", move |_c: Context, _m: Message| {
            let calls = c2.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                HandlerResult::Ok
            }
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(60).await;
    let run = tokio::spawn({
        let d = d.clone();
        async move { d.run_once(BUDGET).await }
    });
    // Capacity: concurrency 10 plus 10 claimed ahead. The first write waits at the gate
    // with ten; counted against the capacity, they would stop the run at 20.
    until(|| calls.load(Ordering::SeqCst) > 20).await;
    gate.add_permits(1_000);
    let r = run.await.unwrap().unwrap();
    assert_eq!(r.succeeded, 60, "{r}");
    assert_eq!(calls.load(Ordering::SeqCst), 60, "each delivery ran once");
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 60);
    let largest = store.2.load(Ordering::SeqCst);
    assert!(
        (1..=20).contains(&largest),
        "largest completion batch {largest}"
    );
}
