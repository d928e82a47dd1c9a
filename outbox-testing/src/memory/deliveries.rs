//! The operator calls on [`State`] (release held, hold, reset, replay, retry now, cancel,
//! stats),
//! and `OperatorStore` for [`InMemoryStore`].

use async_trait::async_trait;
use outboxkit_core::{
    CancelReport, ConsumerName, DeadReason, Delivery, DeliveryId, DeliveryStatus, Destination,
    EndpointId, Error, ErrorKind, MessageId, OperatorStore, Result, Stats, TenantId, Timestamp,
};

use super::state::*;
use super::InMemoryStore;

impl State {
    // ----- operator calls ------------------------------------------------------------

    /// Every held delivery of the endpoint becomes pending, due at the later of now and its
    /// message's `available_at` (a delayed message published during a pause keeps its time).
    pub(super) fn release_held(
        &mut self,
        tenant: &TenantId,
        endpoint: EndpointId,
        now: Timestamp,
    ) -> u64 {
        let target = Destination::Webhook(endpoint);
        self.release_where(now, |d| &d.tenant == tenant && d.destination == target)
    }

    /// A resumed consumer's held deliveries become due at the later of now and their
    /// message's `available_at` (every tenant's).
    pub(super) fn release_for_consumer(&mut self, name: &ConsumerName, now: Timestamp) -> u64 {
        self.release_where(
            now,
            |d| matches!(&d.destination, Destination::Handler(n) if n == name),
        )
    }

    /// Every held delivery that `which` picks becomes pending, due at the later of now and
    /// its message's `available_at`; returns how many.
    fn release_where(&mut self, now: Timestamp, which: impl Fn(&Delivery) -> bool) -> u64 {
        let held: Vec<DeliveryId> = self
            .rows
            .values()
            .filter(|r| r.d.status == DeliveryStatus::Held && which(&r.d))
            .map(|r| r.d.id)
            .collect();
        for id in &held {
            let available = self
                .rows
                .get(id)
                .and_then(|r| self.messages.get(&r.d.message_id))
                .map_or(now, |m| m.available_at);
            self.modify(*id, |r| {
                r.d.status = DeliveryStatus::Pending;
                r.d.next_attempt_at = now.max(available);
                r.d.updated_at = now;
            });
        }
        held.len() as u64
    }

    /// A paused consumer's pending deliveries wait: `held` until `until` (never).
    pub(super) fn hold_for_consumer(
        &mut self,
        name: &ConsumerName,
        until: Timestamp,
        now: Timestamp,
    ) -> u64 {
        let waiting: Vec<DeliveryId> = self
            .rows
            .values()
            .filter(|r| {
                r.d.status == DeliveryStatus::Pending
                    && matches!(&r.d.destination, Destination::Handler(n) if n == name)
            })
            .map(|r| r.d.id)
            .collect();
        for id in &waiting {
            self.modify(*id, |r| {
                r.d.status = DeliveryStatus::Held;
                r.d.next_attempt_at = until;
                r.d.updated_at = now;
            });
        }
        waiting.len() as u64
    }

    /// The endpoint's pending and held deliveries wait for it: `held` until `until`.
    pub(super) fn hold_for_endpoint(
        &mut self,
        tenant: &TenantId,
        endpoint: EndpointId,
        until: Timestamp,
        now: Timestamp,
    ) -> u64 {
        let target = Destination::Webhook(endpoint);
        let waiting: Vec<DeliveryId> = self
            .rows
            .values()
            .filter(|r| {
                matches!(r.d.status, DeliveryStatus::Pending | DeliveryStatus::Held)
                    && &r.d.tenant == tenant
                    && r.d.destination == target
            })
            .map(|r| r.d.id)
            .collect();
        for id in &waiting {
            self.modify(*id, |r| {
                r.d.status = DeliveryStatus::Held;
                r.d.next_attempt_at = until;
                r.d.updated_at = now;
            });
        }
        waiting.len() as u64
    }

    /// A held delivery gets a fresh budget, due now.
    pub(super) fn reset(
        &mut self,
        tenant: &TenantId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<()> {
        if self.row_of(tenant, id)?.d.status != DeliveryStatus::Held {
            return Err(Error::new(
                ErrorKind::Conflict,
                "only a held delivery can be reset",
            ));
        }
        self.modify(id, |r| {
            r.d.status = DeliveryStatus::Pending;
            r.d.attempts = 0;
            r.d.snoozes = 0;
            r.d.next_attempt_at = now;
            r.d.updated_at = now;
        });
        Ok(())
    }

    /// A dead delivery gets a fresh budget, due now.
    pub(super) fn replay(
        &mut self,
        tenant: &TenantId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<()> {
        if self.row_of(tenant, id)?.d.status != DeliveryStatus::Dead {
            return Err(Error::new(
                ErrorKind::Conflict,
                "only a dead delivery can be replayed",
            ));
        }
        let barrier = super::state::barrier_of(&self.row_of(tenant, id)?.d, &self.endpoints);
        self.modify(id, |r| {
            r.barrier = barrier;
            r.d.status = DeliveryStatus::Pending;
            r.d.attempts = 0;
            r.d.snoozes = 0;
            r.d.run = r.d.run.saturating_add(1);
            r.d.next_attempt_at = now;
            r.d.dead_reason = None;
            r.d.completed_at = None;
            r.d.lease_until = None;
            r.token = None;
            r.d.updated_at = now;
        });
        Ok(())
    }

    /// A pending or held delivery becomes pending, due now, attempts kept.
    pub(super) fn retry_now(
        &mut self,
        tenant: &TenantId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<()> {
        let status = self.row_of(tenant, id)?.d.status;
        if !matches!(status, DeliveryStatus::Pending | DeliveryStatus::Held) {
            return Err(Error::new(
                ErrorKind::Conflict,
                "only a pending or held delivery can be retried now",
            ));
        }
        self.modify(id, |r| {
            r.d.status = DeliveryStatus::Pending;
            r.d.next_attempt_at = now;
            r.d.updated_at = now;
        });
        Ok(())
    }

    /// A pending or held delivery becomes finished `dead` (`cancelled`), attempts and ledger
    /// kept; any other status is a `Conflict` and changes nothing.
    pub(super) fn cancel(
        &mut self,
        tenant: &TenantId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<()> {
        self.row_of(tenant, id)?.d.status.check_cancel()?;
        self.modify(id, |r| {
            r.d.status = DeliveryStatus::Dead;
            r.d.dead_reason = Some(DeadReason::Cancelled);
            r.d.completed_at = Some(now);
            r.d.next_attempt_at = now;
            r.d.lease_until = None;
            r.token = None;
            r.d.updated_at = now;
        });
        Ok(())
    }

    /// Every pending or held delivery of the tenant's message is cancelled; the others are
    /// counted as skipped.
    pub(super) fn cancel_message(
        &mut self,
        tenant: &TenantId,
        message: MessageId,
        now: Timestamp,
    ) -> Result<CancelReport> {
        if self
            .messages
            .get(&message)
            .is_none_or(|m| &m.tenant != tenant)
        {
            return Err(not_found("message"));
        }
        let mine: Vec<(DeliveryId, DeliveryStatus)> = self
            .rows
            .values()
            .filter(|r| r.d.message_id == message && &r.d.tenant == tenant)
            .map(|r| (r.d.id, r.d.status))
            .collect();
        let mut report = CancelReport::default();
        for (id, status) in mine {
            if status.check_cancel().is_ok() {
                self.cancel(tenant, id, now)?;
                report.cancelled += 1;
            } else {
                report.skipped += 1;
            }
        }
        Ok(report)
    }

    /// Counts per status and the oldest due claimable delivery.
    pub(super) fn stats(&self, now: Timestamp) -> Stats {
        let mut s = Stats::default();
        for r in self.rows.values() {
            s.add(r.d.status, 1);
        }
        s.oldest_due_at = self.due.first().map(|k| k.0).filter(|t| *t <= now);
        s.oldest_due_age = s.oldest_due_at.map(|t| now.duration_since(t));
        s
    }

    /// [`State::stats`] over the rows `keep` accepts.
    pub(super) fn stats_where(&self, now: Timestamp, keep: impl Fn(&Delivery) -> bool) -> Stats {
        let mut s = Stats::default();
        for r in self.rows.values().filter(|r| keep(&r.d)) {
            s.add(r.d.status, 1);
            if !r.d.status.is_finished() && r.d.next_attempt_at <= now {
                let t = r.d.next_attempt_at;
                s.oldest_due_at = Some(s.oldest_due_at.map_or(t, |o| o.min(t)));
            }
        }
        s.oldest_due_age = s.oldest_due_at.map(|t| now.duration_since(t));
        s
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

    async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        let now = self.now();
        self.lock().cancel(tenant, delivery, now)?;
        // A later delivery of its ordering key may be claimable now.
        self.wake();
        Ok(())
    }

    async fn cancel_message(&self, tenant: &TenantId, message: MessageId) -> Result<CancelReport> {
        let now = self.now();
        let report = self.lock().cancel_message(tenant, message, now)?;
        if report.cancelled > 0 {
            self.wake();
        }
        Ok(report)
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
