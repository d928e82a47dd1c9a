//! `DeliveryStore` for [`InMemoryStore`], the hot path: take the time, lock, call the
//! claim protocol (`claim.rs`), unlock, wake listeners.

use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::permits::validate_rate;
use outboxkit_core::{
    ClaimRequest, Claimed, Completion, DeliveryStore, EndpointId, Lease, Permits, ReleaseReport,
    Result, TenantId, Timestamp, WakeListener,
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

    async fn take_permits(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
        rate: u32,
        want: u32,
        now: Timestamp,
    ) -> Result<Permits> {
        validate_rate(rate)?;
        let mut state = self.lock();
        let log = state.permits.entry((tenant.clone(), endpoint)).or_default();
        Ok(log.take(rate, want, now))
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        Some(self.shared.wakeups.listener())
    }
}
