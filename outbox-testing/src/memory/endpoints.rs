//! Endpoints and consumers on [`State`] (tenant-scoped, updates that hold or release
//! deliveries), and `EndpointStore` for [`InMemoryStore`].

use async_trait::async_trait;
use outboxkit_core::endpoint::check_description;
use outboxkit_core::{
    Consumer, ConsumerName, ConsumerStatus, Endpoint, EndpointId, EndpointStore, EndpointUpdate,
    Error, ErrorKind, Result, TenantId, Timestamp,
};

use super::state::*;
use super::InMemoryStore;

impl State {
    // ----- endpoints and consumers ---------------------------------------------------

    pub(super) fn create_endpoint(&mut self, e: &Endpoint) -> Result<()> {
        check_description(&e.description)?;
        outboxkit_core::endpoint::check_rate_limit(e.rate_limit)?;
        outboxkit_core::endpoint::check_headers(&e.headers)?;
        if self.endpoints.contains_key(&e.id) {
            return Err(Error::new(
                ErrorKind::Conflict,
                "an endpoint with this id exists",
            ));
        }
        let mut e = e.clone();
        e.last_delivery = None;
        self.endpoints.insert(e.id, e);
        Ok(())
    }

    pub(super) fn endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<&Endpoint> {
        self.endpoints
            .get(&id)
            .filter(|e| &e.tenant == tenant)
            .ok_or_else(|| not_found("endpoint"))
    }

    pub(super) fn list_endpoints(&self, tenant: &TenantId) -> Vec<Endpoint> {
        let mut v: Vec<Endpoint> = self
            .endpoints
            .values()
            .filter(|e| &e.tenant == tenant)
            .cloned()
            .collect();
        v.sort_by_key(|e| (e.created_at, e.id));
        v
    }

    /// Apply an update; returns the endpoint and whether held deliveries were released.
    pub(super) fn update_endpoint(
        &mut self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
        now: Timestamp,
    ) -> Result<(Endpoint, u64)> {
        update.validate()?;
        self.endpoint(tenant, id)?;
        let e = self
            .endpoints
            .get_mut(&id)
            .ok_or_else(|| not_found("endpoint"))?;
        // Checked on a copy: a refused update changes nothing.
        let mut after = e.clone();
        update.apply(&mut after, now);
        outboxkit_core::endpoint::check_headers(&after.headers)?;
        *e = after.clone();
        let e = after;
        let released = if update.releases_held(&e.status) {
            self.release_held(tenant, id, now)
        } else {
            0
        };
        if let Some(until) = update.holds_until(now) {
            self.hold_for_endpoint(tenant, id, until, now);
        }
        Ok((e, released))
    }

    /// Remove the endpoint; its held deliveries become due so the next claim ends them.
    pub(super) fn delete_endpoint(
        &mut self,
        tenant: &TenantId,
        id: EndpointId,
        now: Timestamp,
    ) -> Result<u64> {
        self.endpoint(tenant, id)?;
        self.endpoints.remove(&id);
        Ok(self.release_held(tenant, id, now))
    }

    /// Pause or resume a consumer; returns it and how many deliveries were released.
    pub(super) fn set_consumer_status(
        &mut self,
        name: &ConsumerName,
        status: ConsumerStatus,
        now: Timestamp,
    ) -> Result<(Consumer, u64)> {
        let c = self
            .consumers
            .get_mut(name)
            .ok_or_else(|| not_found("consumer"))?;
        c.status = status;
        let c = c.clone();
        let released = match status.hold_until() {
            Some(until) => {
                self.hold_for_consumer(name, until, now);
                0
            }
            None => self.release_for_consumer(name, now),
        };
        Ok((c, released))
    }

    pub(super) fn delete_consumer(&mut self, name: &ConsumerName) -> Result<()> {
        self.consumers
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| not_found("consumer"))
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
        let mut state = self.lock();
        let mut consumer = consumer.clone();
        // A restart's registration never un-pauses; a new consumer is active.
        consumer.status = state
            .consumers
            .get(&consumer.name)
            .map_or(ConsumerStatus::Active, |c| c.status);
        state.consumers.insert(consumer.name.clone(), consumer);
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        Ok(self.lock().consumers.values().cloned().collect())
    }

    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        self.lock().delete_consumer(name)
    }

    async fn set_consumer_status(
        &self,
        name: &ConsumerName,
        status: ConsumerStatus,
    ) -> Result<Consumer> {
        let now = self.now();
        let (consumer, released) = self.lock().set_consumer_status(name, status, now)?;
        if released > 0 {
            self.wake();
        }
        Ok(consumer)
    }
}
