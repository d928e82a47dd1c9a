//! The whole conformance suite against `InMemoryStore`: directly, behind `Box<dyn Store>`,
//! behind a nested `Arc<dyn Store>`, and through `FaultyStore` at an error ratio of 0; and
//! `conformance_tests!` alone against a store without a `TokenStore` (`without_tokens`).

use std::sync::Arc;

use outboxkit_core::tokens::TokenStore;
use outboxkit_core::Store;
use outboxkit_testing::conformance::Fixture;
use outboxkit_testing::{FaultyStore, InMemoryStore, ManualClock};

fn memory(clock: &Arc<ManualClock>) -> InMemoryStore {
    InMemoryStore::new(clock.clone())
}

/// Each fixture reopens its store as a clone: a second handle to the same data.
fn fixture(store: Arc<dyn Store>, tokens: InMemoryStore, clock: Arc<ManualClock>) -> Fixture {
    let again = store.clone();
    Fixture::new(store, clock)
        .with_reopen(move || {
            let s = again.clone();
            async move { s }
        })
        .with_tokens(Arc::new(tokens) as Arc<dyn TokenStore>)
}

mod direct {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let store = memory(&clock);
        let second = store.clone();
        let tokens = store.clone();
        Some(
            Fixture::new(Arc::new(store), clock)
                .with_reopen(move || {
                    let s: Arc<dyn Store> = Arc::new(second.clone());
                    async move { s }
                })
                .with_tokens(Arc::new(tokens.clone()))
                .with_console(Arc::new(tokens)),
        )
    }

    outboxkit_testing::conformance_tests!(setup);

    outboxkit_testing::token_conformance_tests!(setup);

    outboxkit_testing::console_conformance_tests!(setup);
}

mod boxed {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let m = memory(&clock);
        let store: Arc<dyn Store> = Arc::new(Box::new(m.clone()) as Box<dyn Store>);
        let console = Box::new(m.clone()) as Box<dyn outboxkit_core::ConsoleStore>;
        Some(fixture(store, m, clock).with_console(Arc::new(console)))
    }

    outboxkit_testing::conformance_tests!(setup);

    outboxkit_testing::token_conformance_tests!(setup);

    outboxkit_testing::console_conformance_tests!(setup);
}

mod nested_arc {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let m = memory(&clock);
        let store: Arc<dyn Store> = Arc::new(Arc::new(m.clone()) as Arc<dyn Store>);
        Some(fixture(store, m, clock))
    }

    outboxkit_testing::conformance_tests!(setup);

    outboxkit_testing::token_conformance_tests!(setup);
}

mod faulty_at_zero {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let m = memory(&clock);
        let store: Arc<dyn Store> = Arc::new(FaultyStore::new(m.clone(), 42).error_ratio(0.0));
        Some(fixture(store, m, clock))
    }

    outboxkit_testing::conformance_tests!(setup);

    outboxkit_testing::token_conformance_tests!(setup);
}

/// A store that never serves the admin API: it implements the `Store` traits (forwarding to
/// an `InMemoryStore`) and no `TokenStore`, and its fixture has no token store. It passes
/// `conformance_tests!`: no case outside `token_conformance_tests!` needs tokens (one that
/// did would panic in `Fixture::tokens`).
mod without_tokens {
    use std::time::Duration;

    use outboxkit_core::{
        async_trait, Attempt, ClaimRequest, Claimed, Completion, Consumer, ConsumerName, Delivery,
        DeliveryFilter, DeliveryId, DeliveryStore, Endpoint, EndpointId, EndpointStore,
        EndpointUpdate, Enqueued, Lease, Ledger, Message, MessageId, MessageStore, NewMessage,
        OperatorStore, Page, PageRequest, Permits, PurgeReport, ReleaseReport, Result,
        RetentionCutoffs, Stats, TenantId, TenantStats, Timestamp, WakeListener,
    };

    use super::*;

    #[derive(Debug, Clone)]
    struct StoreOnly(InMemoryStore);

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl DeliveryStore for StoreOnly {
        async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
            self.0.claim(request).await
        }
        async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
            self.0.complete_many(items).await
        }
        async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
            self.0.release(leases, delay).await
        }
        async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
            self.0.extend(lease, by).await
        }
        async fn mark_sending(&self, lease: &Lease) -> Result<()> {
            self.0.mark_sending(lease).await
        }
        async fn take_permits(
            &self,
            tenant: &TenantId,
            endpoint: EndpointId,
            rate: u32,
            want: u32,
            now: Timestamp,
        ) -> Result<Permits> {
            self.0.take_permits(tenant, endpoint, rate, want, now).await
        }

        fn wake_listener(&self) -> Option<WakeListener> {
            self.0.wake_listener()
        }

        fn parallel_claims(&self) -> usize {
            self.0.parallel_claims()
        }
    }

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl OperatorStore for StoreOnly {
        async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
            self.0.release_held(tenant, endpoint).await
        }
        async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
            self.0.replay(tenant, delivery).await
        }
        async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
            self.0.retry_now(tenant, delivery).await
        }
        async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
            self.0.reset(tenant, delivery).await
        }
        async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
            self.0.cancel(tenant, delivery).await
        }
        async fn cancel_message(
            &self,
            tenant: &TenantId,
            message: outboxkit_core::MessageId,
        ) -> Result<outboxkit_core::CancelReport> {
            self.0.cancel_message(tenant, message).await
        }
        async fn stats(&self) -> Result<Stats> {
            self.0.stats().await
        }
        async fn queue_stats(&self) -> Result<Stats> {
            self.0.queue_stats().await
        }
        async fn tenant_stats(
            &self,
            tenant: &TenantId,
            endpoint: Option<EndpointId>,
        ) -> Result<Stats> {
            self.0.tenant_stats(tenant, endpoint).await
        }
    }

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl MessageStore for StoreOnly {
        async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
            self.0.enqueue(message).await
        }
        async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
            self.0.enqueue_batch(messages).await
        }
    }

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl outboxkit_core::EventTypeStore for StoreOnly {
        async fn put_event_type(
            &self,
            t: &outboxkit_core::NewEventType,
        ) -> Result<outboxkit_core::EventType> {
            self.0.put_event_type(t).await
        }
        async fn get_event_type(
            &self,
            topic: &outboxkit_core::Topic,
        ) -> Result<outboxkit_core::EventType> {
            self.0.get_event_type(topic).await
        }
        async fn list_event_types(&self) -> Result<Vec<outboxkit_core::EventType>> {
            self.0.list_event_types().await
        }
        async fn delete_event_type(&self, topic: &outboxkit_core::Topic) -> Result<()> {
            self.0.delete_event_type(topic).await
        }
        async fn catalogue_mode(&self) -> Result<outboxkit_core::CatalogueMode> {
            self.0.catalogue_mode().await
        }
        async fn set_catalogue_mode(&self, mode: outboxkit_core::CatalogueMode) -> Result<()> {
            self.0.set_catalogue_mode(mode).await
        }
    }

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl EndpointStore for StoreOnly {
        async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()> {
            self.0.create_endpoint(endpoint).await
        }
        async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
            self.0.get_endpoint(tenant, id).await
        }
        async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
            self.0.list_endpoints(tenant).await
        }
        async fn update_endpoint(
            &self,
            tenant: &TenantId,
            id: EndpointId,
            update: &EndpointUpdate,
        ) -> Result<Endpoint> {
            self.0.update_endpoint(tenant, id, update).await
        }
        async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
            self.0.delete_endpoint(tenant, id).await
        }
        async fn put_consumer(&self, consumer: &Consumer) -> Result<()> {
            self.0.put_consumer(consumer).await
        }
        async fn list_consumers(&self) -> Result<Vec<Consumer>> {
            self.0.list_consumers().await
        }
        async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
            self.0.delete_consumer(name).await
        }
        async fn set_consumer_status(
            &self,
            name: &ConsumerName,
            status: outboxkit_core::ConsumerStatus,
        ) -> Result<Consumer> {
            self.0.set_consumer_status(name, status).await
        }
    }

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl Ledger for StoreOnly {
        async fn list_deliveries(
            &self,
            tenant: &TenantId,
            filter: &DeliveryFilter,
            page: PageRequest,
        ) -> Result<Page<Delivery>> {
            self.0.list_deliveries(tenant, filter, page).await
        }
        async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
            self.0.get_delivery(tenant, id).await
        }
        async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
            self.0.get_message(tenant, id).await
        }
        async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
            self.0.attempts(tenant, delivery).await
        }
        async fn purge_expired(
            &self,
            cutoffs: &RetentionCutoffs,
            limit: u32,
        ) -> Result<PurgeReport> {
            self.0.purge_expired(cutoffs, limit).await
        }
        async fn purge_tenant(
            &self,
            tenant: &TenantId,
            before: Timestamp,
            limit: u32,
        ) -> Result<PurgeReport> {
            self.0.purge_tenant(tenant, before, limit).await
        }
        async fn tenants(&self) -> Result<Vec<TenantStats>> {
            self.0.tenants().await
        }
    }

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let store = StoreOnly(memory(&clock));
        let second = store.clone();
        Some(Fixture::new(Arc::new(store), clock).with_reopen(move || {
            let s: Arc<dyn Store> = Arc::new(second.clone());
            async move { s }
        }))
    }

    outboxkit_testing::conformance_tests!(setup);
}
