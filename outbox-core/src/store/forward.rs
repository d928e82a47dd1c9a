//! The store traits forwarded through `Arc<T>` and `Box<T>`, so a shared or boxed store is
//! a store. Every method is written out (`clippy::missing_trait_methods`): a wrapper never
//! silently inherits a default.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::catalogue::{CatalogueMode, EventType, NewEventType};
use crate::claim::{ClaimRequest, Claimed, Completion, Lease, ReleaseReport};
use crate::endpoint::{Consumer, ConsumerStatus, Endpoint, EndpointUpdate};
use crate::error::Result;
use crate::ids::{ConsumerName, DeliveryId, EndpointId, MessageId, TenantId, Topic};
use crate::model::{Attempt, Delivery, Message, NewMessage};
use crate::permits::Permits;
use crate::retention::RetentionCutoffs;
use crate::time::Timestamp;
use crate::wake::WakeListener;

use super::{
    CancelReport, DeliveryFilter, DeliveryStore, EndpointStore, Enqueued, EventTypeStore, Ledger,
    MessageStore, OperatorStore, Page, PageRequest, PurgeReport, Stats, TenantStats,
};

macro_rules! forward {
    ($ptr:ident) => {
        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: EventTypeStore + ?Sized> EventTypeStore for $ptr<T> {
            async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType> {
                (**self).put_event_type(event_type).await
            }
            async fn get_event_type(&self, topic: &Topic) -> Result<EventType> {
                (**self).get_event_type(topic).await
            }
            async fn list_event_types(&self) -> Result<Vec<EventType>> {
                (**self).list_event_types().await
            }
            async fn delete_event_type(&self, topic: &Topic) -> Result<()> {
                (**self).delete_event_type(topic).await
            }
            async fn catalogue_mode(&self) -> Result<CatalogueMode> {
                (**self).catalogue_mode().await
            }
            async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()> {
                (**self).set_catalogue_mode(mode).await
            }
        }

        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: DeliveryStore + ?Sized> DeliveryStore for $ptr<T> {
            async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
                (**self).claim(request).await
            }
            async fn complete_many(
                &self,
                items: &[(Lease, Completion)],
            ) -> Result<Vec<Result<()>>> {
                (**self).complete_many(items).await
            }
            async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
                (**self).release(leases, delay).await
            }
            async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
                (**self).extend(lease, by).await
            }
            async fn mark_sending(&self, lease: &Lease) -> Result<()> {
                (**self).mark_sending(lease).await
            }
            async fn take_permits(
                &self,
                tenant: &TenantId,
                endpoint: EndpointId,
                rate: u32,
                want: u32,
                now: Timestamp,
            ) -> Result<Permits> {
                (**self)
                    .take_permits(tenant, endpoint, rate, want, now)
                    .await
            }
            fn wake_listener(&self) -> Option<WakeListener> {
                (**self).wake_listener()
            }
            fn parallel_claims(&self) -> usize {
                (**self).parallel_claims()
            }
        }

        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: OperatorStore + ?Sized> OperatorStore for $ptr<T> {
            async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
                (**self).release_held(tenant, endpoint).await
            }
            async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
                (**self).replay(tenant, delivery).await
            }
            async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
                (**self).retry_now(tenant, delivery).await
            }
            async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
                (**self).reset(tenant, delivery).await
            }
            async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
                (**self).cancel(tenant, delivery).await
            }
            async fn cancel_message(
                &self,
                tenant: &TenantId,
                message: MessageId,
            ) -> Result<CancelReport> {
                (**self).cancel_message(tenant, message).await
            }
            async fn stats(&self) -> Result<Stats> {
                (**self).stats().await
            }
            async fn queue_stats(&self) -> Result<Stats> {
                (**self).queue_stats().await
            }
            async fn tenant_stats(
                &self,
                tenant: &TenantId,
                endpoint: Option<EndpointId>,
            ) -> Result<Stats> {
                (**self).tenant_stats(tenant, endpoint).await
            }
        }

        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: MessageStore + ?Sized> MessageStore for $ptr<T> {
            async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
                (**self).enqueue(message).await
            }
            async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
                (**self).enqueue_batch(messages).await
            }
        }

        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: EndpointStore + ?Sized> EndpointStore for $ptr<T> {
            async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()> {
                (**self).create_endpoint(endpoint).await
            }
            async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
                (**self).get_endpoint(tenant, id).await
            }
            async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
                (**self).list_endpoints(tenant).await
            }
            async fn update_endpoint(
                &self,
                tenant: &TenantId,
                id: EndpointId,
                update: &EndpointUpdate,
            ) -> Result<Endpoint> {
                (**self).update_endpoint(tenant, id, update).await
            }
            async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
                (**self).delete_endpoint(tenant, id).await
            }
            async fn put_consumer(&self, consumer: &Consumer) -> Result<()> {
                (**self).put_consumer(consumer).await
            }
            async fn list_consumers(&self) -> Result<Vec<Consumer>> {
                (**self).list_consumers().await
            }
            async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
                (**self).delete_consumer(name).await
            }
            async fn set_consumer_status(
                &self,
                name: &ConsumerName,
                status: ConsumerStatus,
            ) -> Result<Consumer> {
                (**self).set_consumer_status(name, status).await
            }
        }

        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: Ledger + ?Sized> Ledger for $ptr<T> {
            async fn list_deliveries(
                &self,
                tenant: &TenantId,
                filter: &DeliveryFilter,
                page: PageRequest,
            ) -> Result<Page<Delivery>> {
                (**self).list_deliveries(tenant, filter, page).await
            }
            async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
                (**self).get_delivery(tenant, id).await
            }
            async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
                (**self).get_message(tenant, id).await
            }
            async fn attempts(
                &self,
                tenant: &TenantId,
                delivery: DeliveryId,
            ) -> Result<Vec<Attempt>> {
                (**self).attempts(tenant, delivery).await
            }
            async fn purge_expired(
                &self,
                cutoffs: &RetentionCutoffs,
                limit: u32,
            ) -> Result<PurgeReport> {
                (**self).purge_expired(cutoffs, limit).await
            }
            async fn purge_tenant(
                &self,
                tenant: &TenantId,
                before: Timestamp,
                limit: u32,
            ) -> Result<PurgeReport> {
                (**self).purge_tenant(tenant, before, limit).await
            }
            async fn tenants(&self) -> Result<Vec<TenantStats>> {
                (**self).tenants().await
            }
        }
    };
}

forward!(Arc);
forward!(Box);
