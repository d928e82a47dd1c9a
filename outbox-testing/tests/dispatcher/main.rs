//! The dispatcher driven on `InMemoryStore` with `ManualClock`, `ScriptedTransport`,
//! `WebhookReceiver` (through the real `HttpTransport`) and `MailStandIn`.

mod claims;
mod deadletter;
mod dedup;
mod detail;
mod doubling;
mod fidelity;
mod followups;
mod handlers;
mod headers;
mod isolation;
mod leases;
mod lifecycle;
mod limits;
mod mail;
mod paused;
mod trace;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    Delivery, DeliveryFilter, DeliveryStatus, EndpointId, PageRequest, PlaintextVault, Store,
    TenantId, WebhookSecret, WebhookTransport,
};
use outboxkit_dispatch::{
    Dispatcher, DispatcherBuilder, DispatcherConfig, EndpointAdmin, NewEndpoint, Timer,
};
use outboxkit_testing::memory::InMemoryStore;
use outboxkit_testing::{ManualClock, SeededEntropy};

/// A store, a manual clock and endpoint administration.
#[derive(Debug)]
pub struct World {
    pub clock: Arc<ManualClock>,
    pub store: Arc<dyn Store>,
    pub admin: EndpointAdmin,
    pub tenant: TenantId,
}

pub fn world() -> World {
    let clock = ManualClock::new();
    let entropy = SeededEntropy::new(42);
    let store: Arc<dyn Store> =
        Arc::new(InMemoryStore::new(clock.clone()).with_entropy(entropy.clone()));
    // The receivers live on loopback over http.
    let admin = EndpointAdmin::new(
        store.clone(),
        Arc::new(PlaintextVault),
        clock.clone(),
        entropy,
    )
    .with_url_policy(Arc::new(outboxkit_core::AnyUrl));
    World {
        clock,
        store,
        admin,
        tenant: TenantId::default(),
    }
}

impl World {
    /// A dispatcher builder on this world's store and clock.
    pub fn builder(&self) -> DispatcherBuilder {
        Dispatcher::builder(self.store.clone())
            .clock(self.clock.clone() as Arc<dyn Timer>)
            .entropy(SeededEntropy::new(7))
            .config(DispatcherConfig {
                poll_interval: Duration::from_millis(50),
                ..DispatcherConfig::default()
            })
    }

    /// A dispatcher delivering webhooks through `transport`.
    pub fn webhook_dispatcher(&self, transport: Arc<dyn WebhookTransport>) -> Dispatcher {
        self.builder()
            .webhooks(transport, Arc::new(PlaintextVault))
            .build()
            .unwrap()
    }

    /// An endpoint for every topic at `url`, with its secret.
    pub async fn endpoint(&self, url: &str) -> (EndpointId, WebhookSecret) {
        let (e, s) = self
            .admin
            .create(
                &self.tenant,
                NewEndpoint {
                    url: url.into(),
                    filter: "*".into(),
                    ..NewEndpoint::default()
                },
            )
            .await
            .unwrap();
        (e.id, s)
    }

    /// Every delivery of the default tenant, newest first.
    pub async fn deliveries(&self) -> Vec<Delivery> {
        self.store
            .list_deliveries(
                &self.tenant,
                &DeliveryFilter::default(),
                PageRequest::first(1000),
            )
            .await
            .unwrap()
            .items
    }

    /// The only delivery.
    pub async fn one(&self) -> Delivery {
        let all = self.deliveries().await;
        assert_eq!(all.len(), 1, "{all:#?}");
        all.into_iter().next().unwrap()
    }

    /// Deliveries in a status.
    pub async fn count(&self, status: DeliveryStatus) -> usize {
        self.deliveries()
            .await
            .iter()
            .filter(|d| d.status == status)
            .count()
    }

    /// Enqueue `n` messages of topic `a.b`, each `{"i": i}`.
    pub async fn enqueue_n(&self, n: usize) {
        let batch: Vec<outboxkit_core::NewMessage> = (0..n)
            .map(|i| outboxkit_core::NewMessage::new("a.b", serde_json::json!({ "i": i })))
            .collect();
        self.store.enqueue_batch(batch).await.unwrap();
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

/// `d.run` on a task of its own; it shuts down when the returned sender fires (or is dropped).
pub fn spawn_run(
    d: &Dispatcher,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<outboxkit_dispatch::Report>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let d = d.clone();
    let run = tokio::spawn(async move {
        d.run(async {
            let _ = rx.await;
        })
        .await
        .unwrap()
    });
    (tx, run)
}

pub fn mins(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

/// Wait (real time, bounded) until `cond` holds.
pub async fn until(mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the condition never held");
}

/// A budget long enough for any delivery to be reserved.
pub const BUDGET: Duration = Duration::from_secs(120);
