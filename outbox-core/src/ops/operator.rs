//! Operator calls on top of the store traits: replay dead letters, release held deliveries,
//! retry now, reset, purge, read statistics.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::ids::{DeliveryId, EndpointId, MessageId, TenantId};
use crate::store::{check_purge_limit, CancelReport, DynStore, LedgerExt, PurgeReport, Stats};
use crate::time::DynClock;

/// What an operator does: replay dead letters, release held deliveries, retry now, purge,
/// read statistics.
#[derive(Clone, Debug)]
pub struct Operator {
    store: Arc<DynStore>,
    clock: Arc<DynClock>,
}

impl Operator {
    /// Operator calls on `store`, with time from `clock`.
    pub fn new(store: Arc<DynStore>, clock: Arc<DynClock>) -> Self {
        Operator { store, clock }
    }

    /// Give a dead delivery a fresh budget, due now.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.store.replay(tenant, delivery).await
    }

    /// Release an endpoint's held deliveries.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.store.release_held(tenant, endpoint).await
    }

    /// Make a pending or held delivery due now.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.store.retry_now(tenant, delivery).await
    }

    /// Reset a held delivery to a fresh budget, due now (attempts and snoozes 0). Any other
    /// status is a `Conflict`.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.store.reset(tenant, delivery).await
    }

    /// Cancel a pending or held delivery before it is sent: it becomes `dead` with reason
    /// `cancelled` (replay sends it again). An in-flight or finished delivery is a
    /// `Conflict`.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.store.cancel(tenant, delivery).await
    }

    /// Cancel every pending or held delivery of a message; the in-flight and finished ones
    /// are reported as skipped.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn cancel_message(
        &self,
        tenant: &TenantId,
        message: MessageId,
    ) -> Result<CancelReport> {
        self.store.cancel_message(tenant, message).await
    }

    /// Remove finished deliveries older than `older_than`, `batch` at a time, visiting
    /// tenants in rotation until nothing is left to purge.
    ///
    /// # Cancel safety
    /// Each batch is one store call; dropping the future stops between or within batches,
    /// leaving the batches already purged purged and the rest in place (call it again).
    pub async fn purge(&self, older_than: Duration, batch: u32) -> Result<PurgeReport> {
        check_purge_limit(batch)?;
        let before = self.clock.now().saturating_sub(older_than);
        let mut total = PurgeReport::default();
        for _ in 0..1_000_000 {
            let r = self.store.purge_completed(before, batch).await?;
            if r.tenant.is_none() || (r.deliveries == 0 && r.messages == 0) {
                break;
            }
            total.deliveries += r.deliveries;
            total.messages += r.messages;
            total.tenant = r.tenant;
        }
        Ok(total)
    }

    /// Queue statistics.
    pub async fn stats(&self) -> Result<Stats> {
        self.store.stats().await
    }
}
