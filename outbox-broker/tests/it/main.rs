//! outboxkit-broker against the real local brokers: NATS with JetStream (127.0.0.1:4222, or
//! `OUTBOX_TEST_NATS_URL`) and RabbitMQ (127.0.0.1:5672, or `OUTBOX_TEST_AMQP_URL`). Each
//! test uses its own stream, subjects, exchange and queue names; the tests that stop a
//! broker start a private `nats-server` (or cut a private TCP proxy) and never touch the
//! shared services.

mod amqp;
mod nats;
mod private;
mod sink;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    Attempt, Clock, Consumer, ConsumerName, Delivery, DeliveryFilter, DeliveryStatus,
    DynBrokerTransport, EntropyExt, NewMessage, OsEntropy, PageRequest, RetryPolicy, Store,
    TenantId, TopicFilter,
};
use outboxkit_dispatch::{BrokerSink, Dispatcher, DispatcherConfig, Report, Timer};
use outboxkit_testing::memory::InMemoryStore;
use outboxkit_testing::{ManualClock, SeededEntropy};

pub const BUDGET: Duration = Duration::from_secs(3600);

/// A name no other test (or helper session) uses: `prefix-<random>-<n>`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let r = (OsEntropy.unit_sample() * 1e12) as u64;
    format!(
        "{prefix}-{}-{r:x}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store on a manual clock, and dispatchers publishing through one sink.
#[derive(Debug)]
pub struct World {
    pub clock: Arc<ManualClock>,
    pub store: Arc<dyn Store>,
}

/// The store, with the sink's consumer `events-sink` (every topic) registered so messages
/// enqueued before the first dispatcher fan out to it.
pub async fn world() -> World {
    let clock = ManualClock::new();
    let store: Arc<dyn Store> =
        Arc::new(InMemoryStore::new(clock.clone()).with_entropy(SeededEntropy::new(42)));
    store
        .put_consumer(&Consumer {
            name: ConsumerName::new(SINK).unwrap(),
            filter: TopicFilter::parse("*").unwrap(),
            created_at: clock.now(),
            status: outboxkit_core::ConsumerStatus::Active,
        })
        .await
        .unwrap();
    World { clock, store }
}

/// The consumer name of the tests' sink.
pub const SINK: &str = "events-sink";

/// One second between attempts, many attempts: outages are ridden out by advancing the clock.
pub fn quick_retries() -> RetryPolicy {
    RetryPolicy::schedule(vec![Duration::from_secs(1); 200]).unwrap()
}

impl World {
    /// A dispatcher with its sink registered (so messages enqueued from now on fan out to it).
    pub async fn dispatcher(
        &self,
        transport: Arc<DynBrokerTransport>,
        subject: &str,
    ) -> Dispatcher {
        let sink = BrokerSink::new(transport, subject)
            .unwrap()
            .timeout(Duration::from_secs(5))
            .retry(quick_retries());
        self.dispatcher_with(sink).await
    }

    pub async fn dispatcher_with(&self, sink: BrokerSink) -> Dispatcher {
        let d = Dispatcher::builder(self.store.clone())
            .clock(self.clock.clone() as Arc<dyn Timer>)
            .entropy(SeededEntropy::new(7))
            .config(DispatcherConfig {
                poll_interval: Duration::from_millis(50),
                concurrency: 32,
                ..DispatcherConfig::default()
            })
            .broker(SINK, "*", sink)
            .build()
            .unwrap();
        d.register().await.unwrap();
        d
    }

    /// Enqueue `n` messages over `keys` ordering keys: message i has key `k{i % keys}` and
    /// payload `{"key": "k…", "n": i}` (no ordering key when `keys` is 0).
    pub async fn enqueue(&self, topic: &str, n: usize, keys: usize) {
        for i in 0..n {
            let key = format!("k{}", i % keys.max(1));
            let mut m = NewMessage::new(topic, serde_json::json!({"key": key, "n": i}));
            if keys > 0 {
                m = m.ordering_key(key.clone());
            }
            self.store.enqueue(m).await.unwrap();
        }
    }

    /// Run until nothing is pending or in flight (at most `rounds` runs), one second of
    /// the manual clock between runs.
    pub async fn drain(&self, d: &Dispatcher, rounds: usize) -> Report {
        let mut total = Report::default();
        for _ in 0..rounds {
            let r = d.run_once(BUDGET).await.unwrap();
            total.succeeded += r.succeeded;
            total.retried += r.retried;
            total.held += r.held;
            total.dead += r.dead;
            let open = self.count(DeliveryStatus::Pending).await
                + self.count(DeliveryStatus::Processing).await;
            if open == 0 {
                break;
            }
            self.clock.advance(Duration::from_secs(1));
        }
        total
    }

    pub async fn deliveries(&self) -> Vec<Delivery> {
        let mut out = Vec::new();
        let mut page = PageRequest::first(1000);
        loop {
            let p = self
                .store
                .list_deliveries(&TenantId::default(), &DeliveryFilter::default(), page)
                .await
                .unwrap();
            out.extend(p.items);
            match p.next {
                Some(c) => page.cursor = Some(c),
                None => return out,
            }
        }
    }

    pub async fn count(&self, status: DeliveryStatus) -> usize {
        self.deliveries()
            .await
            .iter()
            .filter(|d| d.status == status)
            .count()
    }

    pub async fn attempts(&self, d: &Delivery) -> Vec<Attempt> {
        self.store
            .attempts(&TenantId::default(), d.id)
            .await
            .unwrap()
    }

    /// The only delivery.
    pub async fn one(&self) -> Delivery {
        let all = self.deliveries().await;
        assert_eq!(all.len(), 1);
        all.into_iter().next().unwrap()
    }
}

/// Check per-key order: for every key, the `n` values arrive increasing.
pub fn assert_key_order(bodies: &[serde_json::Value]) {
    let mut last: std::collections::HashMap<String, i64> = Default::default();
    for b in bodies {
        let data = &b["data"];
        let key = data["key"].as_str().unwrap().to_owned();
        let n = data["n"].as_i64().unwrap();
        if let Some(prev) = last.insert(key.clone(), n) {
            assert!(n > prev, "key {key}: {n} arrived after {prev}");
        }
    }
}
