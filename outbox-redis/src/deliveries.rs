//! Operator reads and changes on deliveries of [`RedisStore`]: release held deliveries,
//! replay, retry now, reset, cancel (`scripts/operator.lua`) and the store-wide stats
//! (`scripts/stats.lua`).

use outboxkit_core::{
    CancelReport, DeliveryStatus, EndpointId, MessageId, Result, Stats, TenantId,
};
use redis::Value;

use crate::error::corrupt;
use crate::rows::{int, items, text, Args};
use crate::store::RedisStore;
use async_trait::async_trait;
use outboxkit_core::DeliveryId;
use outboxkit_core::OperatorStore;

impl RedisStore {
    pub(crate) async fn operator(&self, op: &str, tenant: &TenantId, id: String) -> Result<Value> {
        let mut a = Args::new();
        a.s(op).s(tenant.as_str()).s(id).t(self.now());
        let v = if op == "release_held" {
            // Held deliveries of one endpoint may sit in every shard: the sum.
            let all: Vec<Value> = self.run_all(&self.inner.scripts.operator, &a).await?;
            let n = all
                .iter()
                .map(|v| int(v).ok_or_else(|| corrupt("reply")))
                .sum::<Result<i64>>()?;
            Value::Int(n)
        } else {
            self.run_find(&self.inner.scripts.operator, &a).await?
        };
        self.wake_local();
        Ok(v)
    }

    pub(crate) async fn release_held_rows(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
    ) -> Result<u64> {
        let v = self
            .operator("release_held", tenant, endpoint.to_string())
            .await?;
        int(&v)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| corrupt("reply"))
    }

    pub(crate) async fn store_stats(&self) -> Result<Stats> {
        let now = self.now();
        let mut a = Args::new();
        a.t(now);
        let mut stats = Stats::default();
        for reply in self.run_all::<Value>(&self.inner.scripts.stats, &a).await? {
            let v = items(reply)?;
            let [counts, oldest] = v.as_slice() else {
                return Err(corrupt("reply"));
            };
            add_stats(&mut stats, counts, oldest, now)?;
        }
        Ok(stats)
    }
}

/// Add a shard's flat status/count list and oldest due time (or nil) to `stats`.
pub(crate) fn add_stats(
    stats: &mut Stats,
    counts: &Value,
    oldest: &Value,
    now: outboxkit_core::Timestamp,
) -> Result<()> {
    for pair in items(counts.clone())?.chunks(2) {
        let (Some(name), Some(n)) = (pair.first().and_then(text), pair.get(1).and_then(int)) else {
            return Err(corrupt("reply"));
        };
        if let Ok(status) = DeliveryStatus::parse(&name) {
            stats.add(status, u64::try_from(n).unwrap_or(0));
        }
    }
    if let Some(ms) = int(oldest) {
        let at = outboxkit_core::Timestamp::from_unix_millis(ms).map_err(|_| corrupt("reply"))?;
        if stats.oldest_due_at.is_none_or(|o| at < o) {
            stats.oldest_due_at = Some(at);
            stats.oldest_due_age = Some(now.duration_since(at));
        }
    }
    Ok(())
}

#[async_trait]
impl OperatorStore for RedisStore {
    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.release_held_rows(tenant, endpoint).await
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator("replay", tenant, delivery.to_string())
            .await
            .map(drop)
    }

    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator("retry", tenant, delivery.to_string())
            .await
            .map(drop)
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator("reset", tenant, delivery.to_string())
            .await
            .map(drop)
    }

    async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator("cancel", tenant, delivery.to_string())
            .await
            .map(drop)
    }

    /// A message and its deliveries share one shard: the first shard that has the message
    /// answers for all of them.
    async fn cancel_message(&self, tenant: &TenantId, message: MessageId) -> Result<CancelReport> {
        let v = self
            .operator("cancel_message", tenant, message.to_string())
            .await?;
        let counts = items(v)?;
        let [cancelled, skipped] = counts.as_slice() else {
            return Err(corrupt("reply"));
        };
        let count = |v: &Value| {
            int(v)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| corrupt("reply"))
        };
        Ok(CancelReport {
            cancelled: count(cancelled)?,
            skipped: count(skipped)?,
        })
    }

    async fn stats(&self) -> Result<Stats> {
        self.store_stats().await
    }

    /// The counters behind `stats` are kept per status at every change, so the unfinished
    /// part costs what `stats` costs: a hash read and one due-index head per source, never
    /// a walk over finished deliveries.
    async fn queue_stats(&self) -> Result<Stats> {
        self.store_stats().await.map(Stats::unfinished)
    }

    async fn tenant_stats(&self, tenant: &TenantId, endpoint: Option<EndpointId>) -> Result<Stats> {
        self.tenant_counts(tenant, endpoint).await
    }
}
