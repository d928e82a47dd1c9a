//! Operator reads and changes on deliveries of [`RedisStore`]: release held deliveries,
//! replay, retry now, reset (`scripts/operator.lua`) and the store-wide stats
//! (`scripts/stats.lua`).

use outboxkit_core::{DeliveryStatus, EndpointId, Result, Stats, TenantId};
use redis::Value;

use crate::error::corrupt;
use crate::rows::{int, items, text, Args};
use crate::store::RedisStore;

impl RedisStore {
    pub(crate) async fn operator(&self, op: &str, tenant: &TenantId, id: String) -> Result<Value> {
        let mut a = Args::new();
        a.s(op).s(tenant.as_str()).s(id).t(self.now());
        let v = self.run(&self.inner.scripts.operator, &a).await?;
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
        let reply: Value = self.run(&self.inner.scripts.stats, &a).await?;
        let v = items(reply)?;
        let [counts, oldest] = v.as_slice() else {
            return Err(corrupt("reply"));
        };
        stats_from(counts, oldest, now)
    }
}

/// Stats from a flat status/count list and the oldest due time (or nil).
pub(crate) fn stats_from(
    counts: &Value,
    oldest: &Value,
    now: outboxkit_core::Timestamp,
) -> Result<Stats> {
    let mut stats = Stats::default();
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
        stats.oldest_due_at = Some(at);
        stats.oldest_due_age = Some(now.duration_since(at));
    }
    Ok(stats)
}
