//! Budgets, shutdown, crashes, duplicates and observers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Claimed, Completion, DeliveryId, DeliveryStatus, Lease, Message, NewMessage,
    ReleaseReport, Stats,
};
use outboxkit_dispatch::{Context, DeliveryEvent, HandlerOptions, HandlerResult, Observer};

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

/// A store that hands the first claimed delivery out twice in one batch (when `double`),
/// writes completions slowly (each waits for a permit of the gate, when there is one),
/// remembers the largest completion batch, and, with [`Parallel`], says it runs claims side
/// by side and counts the claims in flight.
#[derive(Debug)]
struct Doubling(
    Arc<dyn outboxkit_core::Store>,
    bool,
    std::sync::atomic::AtomicUsize,
    Option<Arc<tokio::sync::Semaphore>>,
    Option<Parallel>,
);

/// Claims in flight at once, each held for a moment (real time) so that they can overlap.
#[derive(Debug, Default)]
struct Parallel {
    /// What `parallel_claims` says.
    parallel: usize,
    in_flight: std::sync::atomic::AtomicUsize,
    /// The most claims in flight at once.
    most: std::sync::atomic::AtomicUsize,
    /// Claims in flight that ask for webhooks or e-mail, and the most of them at once.
    wide: std::sync::atomic::AtomicUsize,
    wide_most: std::sync::atomic::AtomicUsize,
    /// Webhook deliveries handed out per endpoint, in total.
    per_endpoint: Mutex<HashMap<outboxkit_core::EndpointId, usize>>,
    /// When set, each claim waits for a permit before it reads the store.
    hold: Option<Arc<tokio::sync::Semaphore>>,
}

impl Parallel {
    fn new(parallel: usize) -> Option<Self> {
        Some(Parallel {
            parallel,
            ..Parallel::default()
        })
    }
}

#[async_trait::async_trait]
impl outboxkit_core::DeliveryStore for Doubling {
    async fn claim(&self, r: &ClaimRequest) -> outboxkit_core::Result<Vec<Claimed>> {
        if let Some(p) = &self.4 {
            let now = p.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            p.most.fetch_max(now, Ordering::SeqCst);
            let wide = r.webhook_budget().is_some() || r.email_budget().is_some();
            if wide {
                let now = p.wide.fetch_add(1, Ordering::SeqCst) + 1;
                p.wide_most.fetch_max(now, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            if let Some(hold) = &p.hold {
                hold.acquire().await.expect("never closed").forget();
            }
            let v = self.0.claim(r).await;
            if wide {
                p.wide.fetch_sub(1, Ordering::SeqCst);
            }
            p.in_flight.fetch_sub(1, Ordering::SeqCst);
            let v = v?;
            let mut per = p.per_endpoint.lock().unwrap();
            for c in &v {
                if let Some(e) = c.delivery.destination.endpoint() {
                    *per.entry(e).or_default() += 1;
                }
            }
            return Ok(v);
        }
        let mut v = self.0.claim(r).await?;
        if self.1 {
            if let Some(first) = v.first().cloned() {
                v.push(first);
            }
        }
        Ok(v)
    }

    async fn complete_many(
        &self,
        items: &[(Lease, Completion)],
    ) -> outboxkit_core::Result<Vec<outboxkit_core::Result<()>>> {
        self.2.fetch_max(items.len(), Ordering::SeqCst);
        let _permit = match &self.3 {
            Some(gate) => Some(gate.acquire().await.expect("the gate is never closed")),
            None => None,
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.complete_many(items).await
    }

    async fn release(&self, l: &[Lease], d: Duration) -> outboxkit_core::Result<ReleaseReport> {
        self.0.release(l, d).await
    }

    async fn extend(&self, l: &Lease, by: Duration) -> outboxkit_core::Result<Lease> {
        self.0.extend(l, by).await
    }

    async fn take_permits(
        &self,
        tenant: &outboxkit_core::TenantId,
        endpoint: outboxkit_core::EndpointId,
        rate: u32,
        want: u32,
        now: outboxkit_core::Timestamp,
    ) -> outboxkit_core::Result<outboxkit_core::Permits> {
        self.0.take_permits(tenant, endpoint, rate, want, now).await
    }

    async fn mark_sending(&self, l: &Lease) -> outboxkit_core::Result<()> {
        self.0.mark_sending(l).await
    }

    fn parallel_claims(&self) -> usize {
        self.4.as_ref().map_or(1, |p| p.parallel)
    }
}

#[async_trait::async_trait]
impl outboxkit_core::OperatorStore for Doubling {
    async fn release_held(
        &self,
        t: &outboxkit_core::TenantId,
        e: outboxkit_core::EndpointId,
    ) -> outboxkit_core::Result<u64> {
        self.0.release_held(t, e).await
    }

    async fn replay(
        &self,
        t: &outboxkit_core::TenantId,
        d: DeliveryId,
    ) -> outboxkit_core::Result<()> {
        self.0.replay(t, d).await
    }

    async fn retry_now(
        &self,
        t: &outboxkit_core::TenantId,
        d: DeliveryId,
    ) -> outboxkit_core::Result<()> {
        self.0.retry_now(t, d).await
    }

    async fn reset(
        &self,
        t: &outboxkit_core::TenantId,
        d: DeliveryId,
    ) -> outboxkit_core::Result<()> {
        self.0.reset(t, d).await
    }

    async fn cancel(
        &self,
        t: &outboxkit_core::TenantId,
        d: DeliveryId,
    ) -> outboxkit_core::Result<()> {
        self.0.cancel(t, d).await
    }

    async fn cancel_message(
        &self,
        t: &outboxkit_core::TenantId,
        m: outboxkit_core::MessageId,
    ) -> outboxkit_core::Result<outboxkit_core::CancelReport> {
        self.0.cancel_message(t, m).await
    }

    async fn stats(&self) -> outboxkit_core::Result<Stats> {
        self.0.stats().await
    }

    async fn queue_stats(&self) -> outboxkit_core::Result<Stats> {
        self.0.queue_stats().await
    }

    async fn tenant_stats(
        &self,
        t: &outboxkit_core::TenantId,
        e: Option<outboxkit_core::EndpointId>,
    ) -> outboxkit_core::Result<Stats> {
        self.0.tenant_stats(t, e).await
    }
}

macro_rules! delegate_rest {
    () => {
        #[async_trait::async_trait]
        impl outboxkit_core::MessageStore for Doubling {
            async fn enqueue(
                &self,
                m: NewMessage,
            ) -> outboxkit_core::Result<outboxkit_core::Enqueued> {
                self.0.enqueue(m).await
            }
            async fn enqueue_batch(
                &self,
                m: Vec<NewMessage>,
            ) -> outboxkit_core::Result<Vec<outboxkit_core::Enqueued>> {
                self.0.enqueue_batch(m).await
            }
        }
        #[async_trait::async_trait]
        impl outboxkit_core::EventTypeStore for Doubling {
            async fn put_event_type(
                &self,
                t: &outboxkit_core::NewEventType,
            ) -> outboxkit_core::Result<outboxkit_core::EventType> {
                self.0.put_event_type(t).await
            }
            async fn get_event_type(
                &self,
                topic: &outboxkit_core::Topic,
            ) -> outboxkit_core::Result<outboxkit_core::EventType> {
                self.0.get_event_type(topic).await
            }
            async fn list_event_types(
                &self,
            ) -> outboxkit_core::Result<Vec<outboxkit_core::EventType>> {
                self.0.list_event_types().await
            }
            async fn delete_event_type(
                &self,
                topic: &outboxkit_core::Topic,
            ) -> outboxkit_core::Result<()> {
                self.0.delete_event_type(topic).await
            }
            async fn catalogue_mode(
                &self,
            ) -> outboxkit_core::Result<outboxkit_core::CatalogueMode> {
                self.0.catalogue_mode().await
            }
            async fn set_catalogue_mode(
                &self,
                mode: outboxkit_core::CatalogueMode,
            ) -> outboxkit_core::Result<()> {
                self.0.set_catalogue_mode(mode).await
            }
        }
        #[async_trait::async_trait]
        impl outboxkit_core::EndpointStore for Doubling {
            async fn create_endpoint(
                &self,
                e: &outboxkit_core::Endpoint,
            ) -> outboxkit_core::Result<()> {
                self.0.create_endpoint(e).await
            }
            async fn get_endpoint(
                &self,
                t: &outboxkit_core::TenantId,
                id: outboxkit_core::EndpointId,
            ) -> outboxkit_core::Result<outboxkit_core::Endpoint> {
                self.0.get_endpoint(t, id).await
            }
            async fn list_endpoints(
                &self,
                t: &outboxkit_core::TenantId,
            ) -> outboxkit_core::Result<Vec<outboxkit_core::Endpoint>> {
                self.0.list_endpoints(t).await
            }
            async fn update_endpoint(
                &self,
                t: &outboxkit_core::TenantId,
                id: outboxkit_core::EndpointId,
                u: &outboxkit_core::EndpointUpdate,
            ) -> outboxkit_core::Result<outboxkit_core::Endpoint> {
                self.0.update_endpoint(t, id, u).await
            }
            async fn delete_endpoint(
                &self,
                t: &outboxkit_core::TenantId,
                id: outboxkit_core::EndpointId,
            ) -> outboxkit_core::Result<()> {
                self.0.delete_endpoint(t, id).await
            }
            async fn put_consumer(
                &self,
                c: &outboxkit_core::Consumer,
            ) -> outboxkit_core::Result<()> {
                self.0.put_consumer(c).await
            }
            async fn list_consumers(
                &self,
            ) -> outboxkit_core::Result<Vec<outboxkit_core::Consumer>> {
                self.0.list_consumers().await
            }
            async fn delete_consumer(
                &self,
                n: &outboxkit_core::ConsumerName,
            ) -> outboxkit_core::Result<()> {
                self.0.delete_consumer(n).await
            }
            async fn set_consumer_status(
                &self,
                n: &outboxkit_core::ConsumerName,
                s: outboxkit_core::ConsumerStatus,
            ) -> outboxkit_core::Result<outboxkit_core::Consumer> {
                self.0.set_consumer_status(n, s).await
            }
        }
        #[async_trait::async_trait]
        impl outboxkit_core::Ledger for Doubling {
            async fn list_deliveries(
                &self,
                t: &outboxkit_core::TenantId,
                f: &outboxkit_core::DeliveryFilter,
                p: outboxkit_core::PageRequest,
            ) -> outboxkit_core::Result<outboxkit_core::Page<outboxkit_core::Delivery>> {
                self.0.list_deliveries(t, f, p).await
            }
            async fn get_delivery(
                &self,
                t: &outboxkit_core::TenantId,
                id: DeliveryId,
            ) -> outboxkit_core::Result<outboxkit_core::Delivery> {
                self.0.get_delivery(t, id).await
            }
            async fn get_message(
                &self,
                t: &outboxkit_core::TenantId,
                id: outboxkit_core::MessageId,
            ) -> outboxkit_core::Result<Message> {
                self.0.get_message(t, id).await
            }
            async fn attempts(
                &self,
                t: &outboxkit_core::TenantId,
                d: DeliveryId,
            ) -> outboxkit_core::Result<Vec<outboxkit_core::Attempt>> {
                self.0.attempts(t, d).await
            }
            async fn purge_expired(
                &self,
                c: &outboxkit_core::RetentionCutoffs,
                l: u32,
            ) -> outboxkit_core::Result<outboxkit_core::PurgeReport> {
                self.0.purge_expired(c, l).await
            }
            async fn purge_tenant(
                &self,
                t: &outboxkit_core::TenantId,
                b: outboxkit_core::Timestamp,
                l: u32,
            ) -> outboxkit_core::Result<outboxkit_core::PurgeReport> {
                self.0.purge_tenant(t, b, l).await
            }
            async fn tenants(&self) -> outboxkit_core::Result<Vec<outboxkit_core::TenantStats>> {
                self.0.tenants().await
            }
        }
    };
}
delegate_rest!();

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
    until(|| p.in_flight.load(Ordering::SeqCst) == 2).await;
    // The budget is spent while both claims are in flight: the run ends when the first
    // returns, with the second still out.
    w.advance(BUDGET + Duration::from_secs(1));
    hold.add_permits(2);
    let r = run.await.unwrap().unwrap();
    assert_eq!(r.claimed, 20, "{r}");
    assert_eq!(r.succeeded + r.released, 20, "{r}");
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
