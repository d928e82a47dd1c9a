//! Tenant reads of [`RedisStore`]: one tenant's stats and the list of tenants with their
//! counts (`scripts/tenancy.lua`). Tenant purges are retention (`ledger.rs`).

use outboxkit_core::{EndpointId, Result, Stats, TenantId};
use redis::Value;

use crate::deliveries::stats_from;
use crate::error::corrupt;
use crate::rows::{int, items, text, Args};
use crate::store::RedisStore;

impl RedisStore {
    pub(crate) async fn tenant_counts(
        &self,
        tenant: &TenantId,
        endpoint: Option<EndpointId>,
    ) -> Result<Stats> {
        let now = self.now();
        let mut a = Args::new();
        a.s("stats")
            .t(now)
            .s(tenant.as_str())
            .opt(endpoint.map(|e| e.to_string()));
        let reply: Value = self.run(&self.inner.scripts.tenancy, &a).await?;
        let v = items(reply)?;
        let [counts, oldest] = v.as_slice() else {
            return Err(corrupt("reply"));
        };
        stats_from(counts, oldest, now)
    }
}

/// Every tenant with its counts (the tenancy script's `tenants`).
pub(crate) async fn tenants(store: &RedisStore) -> Result<Vec<outboxkit_core::TenantStats>> {
    let now = store.now();
    let mut a = Args::new();
    a.s("tenants").t(now).s("").s("");
    let reply: Value = store.run(&store.inner.scripts.tenancy, &a).await?;
    items(reply)?
        .into_iter()
        .map(|row| {
            let row = items(row)?;
            let [tenant, counts, oldest, messages] = row.as_slice() else {
                return Err(corrupt("reply"));
            };
            Ok(outboxkit_core::TenantStats {
                tenant: text(tenant)
                    .and_then(|t| TenantId::new(t).ok())
                    .ok_or_else(|| corrupt("reply"))?,
                stats: stats_from(counts, oldest, now)?,
                messages: int(messages)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| corrupt("reply"))?,
            })
        })
        .collect()
}
