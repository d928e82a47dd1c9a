//! The store traits for [`InMemoryStore`]: take the time, lock, call [`super::state`],
//! unlock, wake listeners.

use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    Attempt, ClaimRequest, Claimed, Completion, Consumer, ConsumerName, Delivery, DeliveryFilter,
    DeliveryId, DeliveryStore, Endpoint, EndpointId, EndpointStore, EndpointUpdate, Enqueued,
    Lease, Ledger, Message, MessageId, MessageStore, NewMessage, OperatorStore, Page, PageRequest,
    PurgeReport, ReleaseReport, Result, RetentionCutoffs, Stats, TenantId, TenantStats, Timestamp,
    WakeListener,
};

use super::InMemoryStore;

#[async_trait]
impl DeliveryStore for InMemoryStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        request.validate()?;
        let now = self.now();
        Ok(self.lock().claim(request, now, &*self.entropy))
    }

    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
        let now = self.now();
        let mut state = self.lock();
        Ok(items
            .iter()
            .map(|(l, c)| state.complete(l, c, now))
            .collect())
    }

    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
        let now = self.now();
        let report = self.lock().release(leases, delay, now);
        if report.released > 0 {
            self.wake();
        }
        Ok(report)
    }

    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        let now = self.now();
        self.lock().extend(lease, by, now)
    }

    async fn mark_sending(&self, lease: &Lease) -> Result<()> {
        let now = self.now();
        self.lock().mark_sending(lease, now)
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        Some(self.shared.wakeups.listener())
    }
}

#[async_trait]
impl OperatorStore for InMemoryStore {
    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        let now = self.now();
        let n = self.lock().release_held(tenant, endpoint, now);
        if n > 0 {
            self.wake();
        }
        Ok(n)
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        let now = self.now();
        self.lock().replay(tenant, delivery, now)?;
        self.wake();
        Ok(())
    }

    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        let now = self.now();
        self.lock().retry_now(tenant, delivery, now)?;
        self.wake();
        Ok(())
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        let now = self.now();
        self.lock().reset(tenant, delivery, now)?;
        self.wake();
        Ok(())
    }

    async fn stats(&self) -> Result<Stats> {
        let now = self.now();
        Ok(self.lock().stats(now))
    }

    async fn queue_stats(&self) -> Result<Stats> {
        let now = self.now();
        Ok(self.lock().stats(now).unfinished())
    }

    async fn tenant_stats(&self, tenant: &TenantId, endpoint: Option<EndpointId>) -> Result<Stats> {
        let now = self.now();
        Ok(self.lock().stats_where(now, |d| {
            &d.tenant == tenant && endpoint.is_none_or(|e| d.endpoint() == Some(e))
        }))
    }
}

#[async_trait]
impl MessageStore for InMemoryStore {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        let now = self.now();
        let valid = message.validate(&self.limits, now)?;
        let out = self.lock().enqueue(valid, now, &*self.entropy);
        self.wake();
        Ok(out)
    }

    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        let now = self.now();
        let valid = messages
            .into_iter()
            .map(|m| m.validate(&self.limits, now))
            .collect::<Result<Vec<_>>>()?;
        if valid.is_empty() {
            return Ok(Vec::new());
        }
        let out = {
            let mut state = self.lock();
            valid
                .into_iter()
                .map(|v| state.enqueue(v, now, &*self.entropy))
                .collect()
        };
        self.wake();
        Ok(out)
    }
}

#[async_trait]
impl EndpointStore for InMemoryStore {
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()> {
        self.lock().create_endpoint(endpoint)
    }

    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
        self.lock().endpoint(tenant, id).cloned()
    }

    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
        Ok(self.lock().list_endpoints(tenant))
    }

    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> Result<Endpoint> {
        let now = self.now();
        let (endpoint, released) = self.lock().update_endpoint(tenant, id, update, now)?;
        if released > 0 {
            self.wake();
        }
        Ok(endpoint)
    }

    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
        let now = self.now();
        if self.lock().delete_endpoint(tenant, id, now)? > 0 {
            self.wake();
        }
        Ok(())
    }

    async fn put_consumer(&self, consumer: &Consumer) -> Result<()> {
        self.lock()
            .consumers
            .insert(consumer.name.clone(), consumer.clone());
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        Ok(self.lock().consumers.values().cloned().collect())
    }

    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        self.lock().delete_consumer(name)
    }
}

#[async_trait]
impl Ledger for InMemoryStore {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        self.lock().list(tenant, filter, page)
    }

    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        self.lock().delivery(tenant, id)
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        self.lock().message(tenant, id)
    }

    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
        self.lock().attempts(tenant, delivery)
    }

    async fn purge_expired(&self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport> {
        self.lock().purge(cutoffs, limit)
    }

    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        self.lock().purge_tenant(tenant, before, limit)
    }

    async fn tenants(&self) -> Result<Vec<TenantStats>> {
        let now = self.now();
        Ok(self.lock().tenants(now))
    }
}
