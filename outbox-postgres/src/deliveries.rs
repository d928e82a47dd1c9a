//! The operator's changes and reads on deliveries (`DeliveryStore`): release the held
//! deliveries of an endpoint, replay, retry now, reset, cancel, and the counts.
//!
//! # Cancel safety
//!
//! Each change is one statement: dropping its future leaves it applied or not, never half.

use outboxkit_core::{
    CancelReport, DeliveryId, DeliveryStatus, EndpointId, Error, ErrorKind, MessageId, Result,
    Stats, TenantId,
};

use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::sql::{Params, Statement};
use crate::store::PostgresStore;
use async_trait::async_trait;
use outboxkit_core::OperatorStore;

impl PostgresStore {
    /// Run `query` (an update counted with a NOTIFY) and wake local listeners when it
    /// changed something.
    async fn counted(&self, statement: &Statement, params: Params<'_>) -> Result<u64> {
        let row = statement
            .bind(params)?
            .fetch_one(&self.inner.pool)
            .await
            .db()?;
        let n: i64 = get(&row, "n")?;
        if n > 0 {
            self.inner.wake.wakeups().wake();
        }
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// `OperatorStore::release_held`: `release_held` of `sql/deliveries.sql`.
    pub(crate) async fn release_held_now(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
    ) -> Result<u64> {
        let params = Params::new()
            .set("tenant", tenant.as_str())
            .set("endpoint", endpoint.to_string())
            .set("now", ms(self.inner.clock.now()))
            .set("channel", self.inner.channel.as_str());
        self.counted(&self.inner.sql.deliveries.release_held, params)
            .await
    }
}

/// Which operator change [`PostgresStore::operator_change`] runs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change {
    Replay,
    RetryNow,
    Reset,
}

impl PostgresStore {
    /// An operator call on one delivery: changes at most one row; when it changes none,
    /// `NotFound` (not the tenant's) or `Conflict` (wrong status).
    pub(crate) async fn operator_change(
        &self,
        change: Change,
        tenant: &TenantId,
        delivery: DeliveryId,
    ) -> Result<()> {
        let sql = &self.inner.sql.deliveries;
        let (statement, why) = match change {
            Change::Replay => (&sql.replay, "only a dead delivery can be replayed"),
            Change::RetryNow => (
                &sql.retry_now,
                "only a pending or held delivery can be retried now",
            ),
            Change::Reset => (&sql.reset, "only a held delivery can be reset"),
        };
        let params = Params::new()
            .set("delivery", delivery.as_uuid())
            .set("tenant", tenant.as_str())
            .set("now", ms(self.inner.clock.now()))
            .set("channel", self.inner.channel.as_str());
        let n = self.counted(statement, params).await?;
        if n == 0 {
            return Err(self.missing_or_conflict(tenant, delivery, why).await);
        }
        Ok(())
    }

    /// `NotFound` for a delivery that is not the tenant's, else `Conflict` (wrong status).
    async fn missing_or_conflict(
        &self,
        tenant: &TenantId,
        id: DeliveryId,
        why: &'static str,
    ) -> Error {
        let params = Params::new()
            .set("delivery", id.as_uuid())
            .set("tenant", tenant.as_str());
        let found = match self.inner.sql.deliveries.status_of.bind(params) {
            Ok(q) => q.fetch_optional(&self.inner.pool).await,
            Err(e) => return e,
        };
        match found {
            Ok(Some(_)) => Error::new(ErrorKind::Conflict, why),
            Ok(None) => Error::not_found("delivery"),
            Err(e) => crate::error::map_err(e),
        }
    }
}

impl PostgresStore {
    /// `OperatorStore::cancel`: `cancel` of `sql/deliveries.sql`; when it moves nothing,
    /// `NotFound` (not the tenant's) or the `Conflict` of the status it found.
    pub(crate) async fn cancel_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        let now = self.inner.clock.now();
        self.ensure_history(now).await?;
        let params = Params::new()
            .set("delivery", delivery.as_uuid())
            .set("tenant", tenant.as_str())
            .set("now", ms(now))
            .set("channel", self.inner.channel.as_str());
        if self
            .counted(&self.inner.sql.deliveries.cancel, params)
            .await?
            > 0
        {
            return Ok(());
        }
        let params = Params::new()
            .set("delivery", delivery.as_uuid())
            .set("tenant", tenant.as_str());
        let found = (self.inner.sql.deliveries.status_of.bind(params)?)
            .fetch_optional(&self.inner.pool)
            .await
            .db()?;
        let Some(row) = found else {
            return Err(Error::not_found("delivery"));
        };
        let status: String = get(&row, "status")?;
        DeliveryStatus::parse(&status)?.check_cancel()?;
        // Waiting when read again: it was claimed and released between the two statements.
        Err(Error::new(
            ErrorKind::Conflict,
            "the delivery changed while it was cancelled; try again",
        ))
    }

    /// `OperatorStore::cancel_message`: `cancel_message` of `sql/deliveries.sql`.
    pub(crate) async fn cancel_message_now(
        &self,
        tenant: &TenantId,
        message: MessageId,
    ) -> Result<CancelReport> {
        let now = self.inner.clock.now();
        self.ensure_history(now).await?;
        let params = Params::new()
            .set("message", message.as_uuid())
            .set("tenant", tenant.as_str())
            .set("now", ms(now))
            .set("channel", self.inner.channel.as_str());
        let row = (self.inner.sql.deliveries.cancel_message.bind(params)?)
            .fetch_one(&self.inner.pool)
            .await
            .db()?;
        let found: i64 = get(&row, "found")?;
        if found == 0 {
            return Err(Error::not_found("message"));
        }
        let n: i64 = get(&row, "n")?;
        let total: i64 = get(&row, "total")?;
        if n > 0 {
            self.inner.wake.wakeups().wake();
        }
        let cancelled = u64::try_from(n).unwrap_or(0);
        Ok(CancelReport {
            cancelled,
            skipped: u64::try_from(total).unwrap_or(0).saturating_sub(cancelled),
        })
    }
}

impl PostgresStore {
    /// `OperatorStore::stats`: `stats`, over every delivery, finished ones included.
    pub(crate) async fn stats_now(&self) -> Result<Stats> {
        self.stats_of(&self.inner.sql.deliveries.stats).await
    }

    /// `OperatorStore::queue_stats`: `queue_stats`, over the hot table's unfinished rows;
    /// finished deliveries live in the history table, which it never reads.
    pub(crate) async fn queue_stats_now(&self) -> Result<Stats> {
        self.stats_of(&self.inner.sql.deliveries.queue_stats).await
    }

    async fn stats_of(&self, statement: &Statement) -> Result<Stats> {
        let now = self.inner.clock.now();
        let row = (statement.bind(Params::new().set("now", ms(now)))?)
            .fetch_one(&self.inner.pool)
            .await
            .db()?;
        let mut stats = Stats::default();
        for (status, column) in [
            (DeliveryStatus::Pending, "pending"),
            (DeliveryStatus::Processing, "processing"),
            (DeliveryStatus::Sending, "sending"),
            (DeliveryStatus::Succeeded, "succeeded"),
            (DeliveryStatus::Held, "held"),
            (DeliveryStatus::Dead, "dead"),
        ] {
            let n: i64 = get(&row, column)?;
            stats.add(status, u64::try_from(n).unwrap_or(0));
        }
        let oldest: Option<i64> = get(&row, "oldest")?;
        if oldest.is_some() {
            let t = rows::ts(&row, "oldest")?;
            stats.oldest_due_at = Some(t);
            stats.oldest_due_age = Some(now.duration_since(t));
        }
        Ok(stats)
    }
}

/// `OperatorStore`: the changes above, and the counts (one tenant's in `tenancy.rs`).
#[async_trait]
impl OperatorStore for PostgresStore {
    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.release_held_now(tenant, endpoint).await
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator_change(Change::Replay, tenant, delivery).await
    }

    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator_change(Change::RetryNow, tenant, delivery)
            .await
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator_change(Change::Reset, tenant, delivery).await
    }

    async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.cancel_now(tenant, delivery).await
    }

    async fn cancel_message(&self, tenant: &TenantId, message: MessageId) -> Result<CancelReport> {
        self.cancel_message_now(tenant, message).await
    }

    async fn tenant_stats(&self, tenant: &TenantId, endpoint: Option<EndpointId>) -> Result<Stats> {
        crate::tenancy::tenant_stats(self, tenant, endpoint).await
    }

    async fn stats(&self) -> Result<Stats> {
        self.stats_now().await
    }

    async fn queue_stats(&self) -> Result<Stats> {
        self.queue_stats_now().await
    }
}
