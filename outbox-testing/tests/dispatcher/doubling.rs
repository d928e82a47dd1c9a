//! A store wrapper for the lifecycle and claim tests: it hands a delivery out twice, writes
//! completions slowly behind a gate, and says it runs claims side by side.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Claimed, Completion, DeliveryId, Lease, Message, NewMessage, ReleaseReport, Stats,
};

/// A store that hands the first claimed delivery out twice in one batch (when `double`),
/// writes completions slowly (each waits for a permit of the gate, when there is one),
/// remembers the largest completion batch, and, with [`Parallel`], says it runs claims side
/// by side and counts the claims in flight.
#[derive(Debug)]
pub struct Doubling(
    pub Arc<dyn outboxkit_core::Store>,
    pub bool,
    pub std::sync::atomic::AtomicUsize,
    pub Option<Arc<tokio::sync::Semaphore>>,
    pub Option<Parallel>,
);

/// Claims in flight at once, each held for a moment (real time) so that they can overlap.
#[derive(Debug, Default)]
pub struct Parallel {
    /// What `parallel_claims` says.
    pub parallel: usize,
    /// Claims made, in all.
    pub calls: std::sync::atomic::AtomicUsize,
    pub in_flight: std::sync::atomic::AtomicUsize,
    /// The most claims in flight at once.
    pub most: std::sync::atomic::AtomicUsize,
    /// Claims in flight that ask for webhooks or e-mail, and the most of them at once.
    pub wide: std::sync::atomic::AtomicUsize,
    pub wide_most: std::sync::atomic::AtomicUsize,
    /// Webhook deliveries handed out per endpoint, in total.
    pub per_endpoint: Mutex<HashMap<outboxkit_core::EndpointId, usize>>,
    /// When set, each claim waits for a permit before it reads the store.
    pub hold: Option<Arc<tokio::sync::Semaphore>>,
}

impl Parallel {
    pub fn new(parallel: usize) -> Option<Self> {
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
            p.calls.fetch_add(1, Ordering::SeqCst);
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
