//! Fault-injecting store wrapper: a seeded error ratio and latency in front of any store.
//!
//! [`FaultyStore`] decides *before* calling the inner store whether a call fails, so an
//! injected failure never wrote anything: exactly what a dropped connection before the
//! statement looks like. With an error ratio of 0 it is a transparent decorator and passes
//! the whole conformance suite.
//!
//! ```
//! use std::time::Duration;
//! use outboxkit_testing::{FaultyStore, InMemoryStore, ManualClock};
//!
//! let flaky = FaultyStore::new(InMemoryStore::new(ManualClock::new()), 7)
//!     .error_ratio(0.2)
//!     .latency(Duration::from_millis(1));
//! assert_eq!(flaky.injected(), 0);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::ManualClock;

use async_trait::async_trait;
use outboxkit_core::{
    Attempt, CatalogueMode, ClaimRequest, Claimed, Completion, Consumer, ConsumerName, Delivery,
    DeliveryFilter, DeliveryId, DeliveryStore, Endpoint, EndpointId, EndpointStore, EndpointUpdate,
    Enqueued, Error, ErrorKind, EventType, EventTypeStore, Lease, Ledger, Message, MessageId,
    MessageStore, NewEventType, NewMessage, OperatorStore, Page, PageRequest, Permits, PurgeReport,
    ReleaseReport, Result, Stats, TenantId, Timestamp, Topic, WakeListener,
};

/// A store that fails a seeded fraction of calls with [`ErrorKind::Unavailable`] (before
/// the inner store is touched) and optionally sleeps before each call.
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    state: AtomicU64,
    ratio: f64,
    latency: Duration,
    injected: AtomicU64,
    calls: AtomicU64,
    /// Calls per operation (failed or not).
    calls_by_op: std::sync::Mutex<std::collections::HashMap<&'static str, u64>>,
    /// Calls that take store time on a manual clock: (operation, clock, how long).
    slow: Option<(&'static str, Arc<ManualClock>, Duration)>,
    /// Calls of one operation that fail before any other: (operation, how many are left).
    fail_first: Option<(&'static str, AtomicU64)>,
}

impl<S> FaultyStore<S> {
    /// Wrap `inner`; the same `seed` gives the same sequence of failures for the same
    /// sequence of calls. No faults and no latency until configured.
    pub fn new(inner: S, seed: u64) -> Self {
        FaultyStore {
            inner,
            state: AtomicU64::new(seed),
            ratio: 0.0,
            latency: Duration::ZERO,
            injected: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            calls_by_op: Default::default(),
            slow: None,
            fail_first: None,
        }
    }

    /// Fail the first `n` calls to the trait method named `op` (e.g. `"take_permits"`) with
    /// [`ErrorKind::Unavailable`], whatever the error ratio; later calls go through.
    pub fn fail_first(mut self, op: &'static str, n: u64) -> Self {
        self.fail_first = Some((op, AtomicU64::new(n)));
        self
    }

    /// Move `clock` on by `by` before each call to the trait method named `op` (e.g.
    /// `"release"`): the call then takes `by` of the store's time, so a caller that read the
    /// clock before the call sees a later time written than it computed.
    pub fn slow_on(mut self, op: &'static str, clock: Arc<ManualClock>, by: Duration) -> Self {
        self.slow = Some((op, clock, by));
        self
    }

    /// Fail this fraction of calls (clamped to `[0, 1]`; not a number means 0).
    pub fn error_ratio(mut self, ratio: f64) -> Self {
        self.ratio = if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, 1.0)
        };
        self
    }

    /// Sleep this long (tokio time) before every call.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// How many calls failed by injection so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// How many calls were made so far (failed or not).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// How many calls were made so far to the trait method named `op` (failed or not).
    pub fn calls_to(&self, op: &str) -> u64 {
        self.calls_by_op
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(op)
            .copied()
            .unwrap_or(0)
    }

    fn sample(&self) -> f64 {
        // SplitMix64 over a shared counter: reproducible for a given call order.
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    async fn gate(&self, op: &'static str) -> Result<()> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        *self
            .calls_by_op
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(op)
            .or_default() += 1;
        if let Some((slow, clock, by)) = &self.slow {
            if *slow == op {
                clock.advance(*by);
            }
        }
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let forced = self.fail_first.as_ref().is_some_and(|(o, left)| {
            *o == op
                && left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
        });
        if forced || (self.ratio > 0.0 && self.sample() < self.ratio) {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!("injected fault in {op}"),
            ));
        }
        Ok(())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: DeliveryStore> DeliveryStore for FaultyStore<S> {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        self.gate("claim").await?;
        self.inner.claim(request).await
    }

    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
        self.gate("complete_many").await?;
        self.inner.complete_many(items).await
    }

    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
        self.gate("release").await?;
        self.inner.release(leases, delay).await
    }

    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        self.gate("extend").await?;
        self.inner.extend(lease, by).await
    }

    async fn mark_sending(&self, lease: &Lease) -> Result<()> {
        self.gate("mark_sending").await?;
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
        self.gate("take_permits").await?;
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
impl<S: OperatorStore> OperatorStore for FaultyStore<S> {
    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.gate("release_held").await?;
        self.inner.release_held(tenant, endpoint).await
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.gate("replay").await?;
        self.inner.replay(tenant, delivery).await
    }

    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.gate("retry_now").await?;
        self.inner.retry_now(tenant, delivery).await
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.gate("reset").await?;
        self.inner.reset(tenant, delivery).await
    }

    async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.gate("cancel").await?;
        self.inner.cancel(tenant, delivery).await
    }

    async fn cancel_message(
        &self,
        tenant: &TenantId,
        message: outboxkit_core::MessageId,
    ) -> Result<outboxkit_core::CancelReport> {
        self.gate("cancel_message").await?;
        self.inner.cancel_message(tenant, message).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.gate("stats").await?;
        self.inner.stats().await
    }

    async fn queue_stats(&self) -> Result<Stats> {
        self.gate("queue_stats").await?;
        self.inner.queue_stats().await
    }

    async fn tenant_stats(
        &self,
        tenant: &outboxkit_core::TenantId,
        endpoint: Option<outboxkit_core::EndpointId>,
    ) -> Result<Stats> {
        self.gate("tenant_stats").await?;
        self.inner.tenant_stats(tenant, endpoint).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: MessageStore> MessageStore for FaultyStore<S> {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        self.gate("enqueue").await?;
        self.inner.enqueue(message).await
    }
    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        self.gate("enqueue_batch").await?;
        self.inner.enqueue_batch(messages).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: EventTypeStore> EventTypeStore for FaultyStore<S> {
    async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType> {
        self.gate("put_event_type").await?;
        self.inner.put_event_type(event_type).await
    }
    async fn get_event_type(&self, topic: &Topic) -> Result<EventType> {
        self.gate("get_event_type").await?;
        self.inner.get_event_type(topic).await
    }
    async fn list_event_types(&self) -> Result<Vec<EventType>> {
        self.gate("list_event_types").await?;
        self.inner.list_event_types().await
    }
    async fn delete_event_type(&self, topic: &Topic) -> Result<()> {
        self.gate("delete_event_type").await?;
        self.inner.delete_event_type(topic).await
    }
    async fn catalogue_mode(&self) -> Result<CatalogueMode> {
        self.gate("catalogue_mode").await?;
        self.inner.catalogue_mode().await
    }
    async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()> {
        self.gate("set_catalogue_mode").await?;
        self.inner.set_catalogue_mode(mode).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: EndpointStore> EndpointStore for FaultyStore<S> {
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()> {
        self.gate("create_endpoint").await?;
        self.inner.create_endpoint(endpoint).await
    }
    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
        self.gate("get_endpoint").await?;
        self.inner.get_endpoint(tenant, id).await
    }
    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
        self.gate("list_endpoints").await?;
        self.inner.list_endpoints(tenant).await
    }
    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> Result<Endpoint> {
        self.gate("update_endpoint").await?;
        self.inner.update_endpoint(tenant, id, update).await
    }
    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
        self.gate("delete_endpoint").await?;
        self.inner.delete_endpoint(tenant, id).await
    }
    async fn put_consumer(&self, consumer: &Consumer) -> Result<()> {
        self.gate("put_consumer").await?;
        self.inner.put_consumer(consumer).await
    }
    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        self.gate("list_consumers").await?;
        self.inner.list_consumers().await
    }
    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        self.gate("delete_consumer").await?;
        self.inner.delete_consumer(name).await
    }
    async fn set_consumer_status(
        &self,
        name: &ConsumerName,
        status: outboxkit_core::ConsumerStatus,
    ) -> Result<Consumer> {
        self.gate("set_consumer_status").await?;
        self.inner.set_consumer_status(name, status).await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: Ledger> Ledger for FaultyStore<S> {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        self.gate("list_deliveries").await?;
        self.inner.list_deliveries(tenant, filter, page).await
    }
    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        self.gate("get_delivery").await?;
        self.inner.get_delivery(tenant, id).await
    }
    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        self.gate("get_message").await?;
        self.inner.get_message(tenant, id).await
    }
    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
        self.gate("attempts").await?;
        self.inner.attempts(tenant, delivery).await
    }
    async fn purge_expired(
        &self,
        cutoffs: &outboxkit_core::RetentionCutoffs,
        limit: u32,
    ) -> Result<PurgeReport> {
        self.gate("purge_expired").await?;
        self.inner.purge_expired(cutoffs, limit).await
    }
    async fn purge_tenant(
        &self,
        tenant: &outboxkit_core::TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        self.gate("purge_tenant").await?;
        self.inner.purge_tenant(tenant, before, limit).await
    }
    async fn tenants(&self) -> Result<Vec<outboxkit_core::TenantStats>> {
        self.gate("tenants").await?;
        self.inner.tenants().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{InMemoryStore, ManualClock};

    fn msg(i: usize) -> NewMessage {
        NewMessage::new("order.created", serde_json::json!({ "i": i }))
    }

    #[tokio::test]
    async fn ratio_one_fails_every_call_before_the_inner_store() {
        let store = FaultyStore::new(InMemoryStore::new(ManualClock::new()), 1).error_ratio(1.0);
        let e = store.enqueue(msg(0)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_retryable());
        assert!(store.stats().await.is_err());
        assert_eq!(
            store.inner().message_count(),
            0,
            "a failed call wrote nothing"
        );
        assert_eq!((store.injected(), store.calls()), (2, 2));
        assert!(store.wake_listener().is_some(), "wake-ups pass through");
    }

    #[tokio::test]
    async fn failures_follow_the_seed_and_write_nothing() {
        let run = |seed| async move {
            let store = FaultyStore::new(InMemoryStore::new(ManualClock::new()), seed)
                .error_ratio(0.5)
                .latency(Duration::from_millis(1));
            let mut pattern = Vec::new();
            for i in 0..64 {
                pattern.push(store.enqueue(msg(i)).await.is_ok());
            }
            let ok = pattern.iter().filter(|ok| **ok).count();
            assert_eq!(store.inner().message_count(), ok);
            assert_eq!(store.injected() as usize, 64 - ok);
            pattern
        };
        let a = run(7).await;
        assert_eq!(a, run(7).await, "the same seed fails the same calls");
        assert!(a.contains(&true) && a.contains(&false));
        assert_ne!(a, run(8).await);
    }

    #[test]
    fn ratios_are_clamped() {
        let s = FaultyStore::new((), 0).error_ratio(f64::NAN);
        assert_eq!(s.ratio, 0.0);
        assert_eq!(FaultyStore::new((), 0).error_ratio(3.0).ratio, 1.0);
        assert_eq!(FaultyStore::new((), 0).error_ratio(-1.0).ratio, 0.0);
    }
}
