//! [`Timed`]: a store decorator that forwards every call and adds up the time spent in
//! `claim` and `complete_many` (as the dispatcher awaits them), so a burn-down can say how
//! much of its time is the store's claim, the store's completion, and everything else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    Attempt, CatalogueMode, ClaimRequest, Claimed, Completion, Consumer, ConsumerName, Delivery,
    DeliveryFilter, DeliveryId, DeliveryStore, DynStore, Endpoint, EndpointId, EndpointStore,
    EndpointUpdate, Enqueued, EventType, EventTypeStore, Lease, Ledger, Message, MessageId,
    MessageStore, NewEventType, NewMessage, OperatorStore, Page, PageRequest, Permits, PurgeReport,
    ReleaseReport, Result, Stats, Stopwatch, TenantId, Timestamp, Topic, WakeListener,
};

/// Time spent in the claim path, in nanoseconds.
#[derive(Debug, Default)]
pub struct Spent {
    claim_ns: AtomicU64,
    complete_ns: AtomicU64,
    claims: AtomicU64,
    completions: AtomicU64,
    completed_items: AtomicU64,
    largest_completion: AtomicU64,
}

impl Spent {
    /// Seconds in `claim`, in `complete_many`/`complete`, and the number of calls of each.
    pub fn totals(&self) -> (f64, f64, u64, u64) {
        let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
        (
            s(&self.claim_ns),
            s(&self.complete_ns),
            self.claims.load(Ordering::Relaxed),
            self.completions.load(Ordering::Relaxed),
        )
    }

    /// The mean and the largest number of items per completion call.
    pub fn completion_sizes(&self) -> (f64, u64) {
        let calls = self.completions.load(Ordering::Relaxed);
        let items = self.completed_items.load(Ordering::Relaxed);
        let mean = if calls > 0 {
            items as f64 / calls as f64
        } else {
            0.0
        };
        (mean, self.largest_completion.load(Ordering::Relaxed))
    }

    /// `time in claim 41 % (1.20 ms/call), in complete 38 % (1.10 ms/call, 100 items/call,
    /// largest 120)`, shares of `secs` (they may add up to more than 100 %: the dispatcher
    /// writes completions beside its next claim).
    pub fn breakdown(&self, secs: f64) -> String {
        let (claim, complete, nc, nk) = self.totals();
        let (mean, largest) = self.completion_sizes();
        let pct = |x: f64| if secs > 0.0 { 100.0 * x / secs } else { 0.0 };
        let per = |x: f64, n: u64| if n > 0 { 1000.0 * x / n as f64 } else { 0.0 };
        format!(
            "time in claim {:.0} % ({:.2} ms/call), in complete {:.0} % ({:.2} ms/call, \
             {mean:.0} items/call, largest {largest})",
            pct(claim),
            per(claim, nc),
            pct(complete),
            per(complete, nk),
        )
    }

    fn add(&self, which: &AtomicU64, calls: &AtomicU64, d: Duration) {
        which.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        calls.fetch_add(1, Ordering::Relaxed);
    }
}

/// Forwards to `inner`, timing the claim path into `spent`.
#[derive(Debug)]
pub struct Timed {
    inner: Arc<DynStore>,
    /// What was measured.
    pub spent: Arc<Spent>,
}

impl Timed {
    /// Wrap `inner`.
    pub fn new(inner: Arc<DynStore>) -> Self {
        Timed {
            inner,
            spent: Arc::new(Spent::default()),
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl DeliveryStore for Timed {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        let sw = Stopwatch::start();
        let r = self.inner.claim(request).await;
        self.spent
            .add(&self.spent.claim_ns, &self.spent.claims, sw.elapsed());
        r
    }

    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
        let sw = Stopwatch::start();
        let r = self.inner.complete_many(items).await;
        self.spent.add(
            &self.spent.complete_ns,
            &self.spent.completions,
            sw.elapsed(),
        );
        let n = items.len() as u64;
        self.spent.completed_items.fetch_add(n, Ordering::Relaxed);
        self.spent
            .largest_completion
            .fetch_max(n, Ordering::Relaxed);
        r
    }

    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
        self.inner.release(leases, delay).await
    }

    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        self.inner.extend(lease, by).await
    }

    async fn mark_sending(&self, lease: &Lease) -> Result<()> {
        self.inner.mark_sending(lease).await
    }

    async fn take_permits(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
        rate: u32,
        want: u32,
        now: Timestamp,
    ) -> Result<Permits> {
        self.inner
            .take_permits(tenant, endpoint, rate, want, now)
            .await
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        self.inner.wake_listener()
    }

    fn parallel_claims(&self) -> usize {
        self.inner.parallel_claims()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl OperatorStore for Timed {
    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.inner.release_held(tenant, endpoint).await
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.inner.replay(tenant, delivery).await
    }

    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.inner.retry_now(tenant, delivery).await
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.inner.reset(tenant, delivery).await
    }

    async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.inner.cancel(tenant, delivery).await
    }

    async fn cancel_message(
        &self,
        tenant: &TenantId,
        message: outboxkit_core::MessageId,
    ) -> Result<outboxkit_core::CancelReport> {
        self.inner.cancel_message(tenant, message).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.inner.stats().await
    }

    async fn queue_stats(&self) -> Result<Stats> {
        self.inner.queue_stats().await
    }

    async fn tenant_stats(
        &self,
        tenant: &outboxkit_core::TenantId,
        endpoint: Option<outboxkit_core::EndpointId>,
    ) -> Result<Stats> {
        self.inner.tenant_stats(tenant, endpoint).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl MessageStore for Timed {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        self.inner.enqueue(message).await
    }
    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        self.inner.enqueue_batch(messages).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl EventTypeStore for Timed {
    async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType> {
        self.inner.put_event_type(event_type).await
    }
    async fn get_event_type(&self, topic: &Topic) -> Result<EventType> {
        self.inner.get_event_type(topic).await
    }
    async fn list_event_types(&self) -> Result<Vec<EventType>> {
        self.inner.list_event_types().await
    }
    async fn delete_event_type(&self, topic: &Topic) -> Result<()> {
        self.inner.delete_event_type(topic).await
    }
    async fn catalogue_mode(&self) -> Result<CatalogueMode> {
        self.inner.catalogue_mode().await
    }
    async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()> {
        self.inner.set_catalogue_mode(mode).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl EndpointStore for Timed {
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()> {
        self.inner.create_endpoint(endpoint).await
    }
    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
        self.inner.get_endpoint(tenant, id).await
    }
    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
        self.inner.list_endpoints(tenant).await
    }
    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> Result<Endpoint> {
        self.inner.update_endpoint(tenant, id, update).await
    }
    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
        self.inner.delete_endpoint(tenant, id).await
    }
    async fn put_consumer(&self, consumer: &Consumer) -> Result<()> {
        self.inner.put_consumer(consumer).await
    }
    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        self.inner.list_consumers().await
    }
    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        self.inner.delete_consumer(name).await
    }
    async fn set_consumer_status(
        &self,
        name: &ConsumerName,
        status: outboxkit_core::ConsumerStatus,
    ) -> Result<Consumer> {
        self.inner.set_consumer_status(name, status).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl Ledger for Timed {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        self.inner.list_deliveries(tenant, filter, page).await
    }
    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        self.inner.get_delivery(tenant, id).await
    }
    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        self.inner.get_message(tenant, id).await
    }
    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
        self.inner.attempts(tenant, delivery).await
    }
    async fn purge_expired(
        &self,
        cutoffs: &outboxkit_core::RetentionCutoffs,
        limit: u32,
    ) -> Result<PurgeReport> {
        self.inner.purge_expired(cutoffs, limit).await
    }
    async fn purge_tenant(
        &self,
        tenant: &outboxkit_core::TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        self.inner.purge_tenant(tenant, before, limit).await
    }
    async fn tenants(&self) -> Result<Vec<outboxkit_core::TenantStats>> {
        self.inner.tenants().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breakdown_adds_up() {
        let s = Spent::default();
        s.add(&s.claim_ns, &s.claims, Duration::from_millis(400));
        s.add(&s.complete_ns, &s.completions, Duration::from_millis(300));
        s.add(&s.complete_ns, &s.completions, Duration::from_millis(100));
        s.completed_items.store(300, Ordering::Relaxed);
        s.largest_completion.store(200, Ordering::Relaxed);
        let text = s.breakdown(1.0);
        assert!(text.contains("claim 40 % (400.00 ms/call)"), "{text}");
        assert!(
            text.contains("complete 40 % (200.00 ms/call, 150 items/call, largest 200)"),
            "{text}"
        );
    }
}
