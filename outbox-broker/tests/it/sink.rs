//! The dispatcher's side of a broker sink, on a fake transport: deadlines and the circuit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    BrokerMessage, BrokerResponse, BrokerTransport, NewMessage, Store, SystemClock,
};
use outboxkit_dispatch::{BrokerSink, Dispatcher, DispatcherConfig, Timer};
use outboxkit_testing::memory::InMemoryStore;
use outboxkit_testing::SeededEntropy;

use crate::{quick_retries, SINK};

/// Acknowledges every publish after a short pause, counting them.
#[derive(Debug, Default)]
struct Acking {
    published: AtomicUsize,
}

#[async_trait]
impl BrokerTransport for Acking {
    async fn publish(&self, _message: BrokerMessage) -> BrokerResponse {
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.published.fetch_add(1, Ordering::SeqCst);
        BrokerResponse::Acknowledged { duplicate: false }
    }
}

/// A sink's deliveries waiting for a free slot are judged by the sink's own deadline: with a
/// webhook timeout that leaves no slack in the lease, a 1 s sink still has 37 s of it, so
/// nothing is put back.
#[tokio::test]
async fn a_sinks_deliveries_wait_by_the_sinks_deadline_not_the_webhook_timeout() {
    let clock = Arc::new(SystemClock);
    let store: Arc<dyn Store> =
        Arc::new(InMemoryStore::new(clock.clone()).with_entropy(SeededEntropy::new(3)));
    let transport = Arc::new(Acking::default());
    let sink = BrokerSink::new(transport.clone(), "events.{topic}")
        .unwrap()
        .timeout(Duration::from_secs(1))
        .retry(quick_retries())
        .concurrency(1);
    let d = Dispatcher::builder(store.clone())
        .clock(clock as Arc<dyn Timer>)
        .entropy(SeededEntropy::new(7))
        .config(DispatcherConfig {
            poll_interval: Duration::from_millis(20),
            concurrency: 1,
            // Lease 40 s = webhook timeout 38 s + margin 2 s: no slack for a webhook.
            webhook_timeout: Duration::from_secs(38),
            ..DispatcherConfig::default()
        })
        .broker(SINK, "*", sink)
        .build()
        .unwrap();
    d.register().await.unwrap();
    for i in 0..5 {
        store
            .enqueue(NewMessage::new(
                "order.created",
                serde_json::json!({ "n": i }),
            ))
            .await
            .unwrap();
    }
    let r = d.run_once(Duration::from_secs(30)).await.unwrap();
    assert_eq!(r.succeeded, 5);
    assert_eq!(transport.published.load(Ordering::SeqCst), 5);
    assert_eq!(r.released, 0, "no delivery was put back for lack of slack");
}
