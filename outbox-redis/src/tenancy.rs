//! Tenant reads of [`RedisStore`]: one tenant's stats and the list of tenants with their
//! counts (`scripts/tenancy.lua`). Tenant purges are retention (`ledger.rs`).

use std::collections::BTreeMap;

use outboxkit_core::{EndpointId, Result, Stats, TenantId, TenantStats};
use redis::Value;

use crate::deliveries::add_stats;
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
        let mut stats = Stats::default();
        for reply in self
            .run_all::<Value>(&self.inner.scripts.tenancy, &a)
            .await?
        {
            let v = items(reply)?;
            let [counts, oldest] = v.as_slice() else {
                return Err(corrupt("reply"));
            };
            add_stats(&mut stats, counts, oldest, now)?;
        }
        Ok(stats)
    }
}

/// Every tenant with its counts (the tenancy script's `tenants`), summed over the shards,
/// ordered by tenant.
pub(crate) async fn tenants(store: &RedisStore) -> Result<Vec<TenantStats>> {
    let now = store.now();
    let mut a = Args::new();
    a.s("tenants").t(now).s("").s("");
    let mut all: BTreeMap<String, TenantStats> = BTreeMap::new();
    for reply in store
        .run_all::<Value>(&store.inner.scripts.tenancy, &a)
        .await?
    {
        for row in items(reply)? {
            let row = items(row)?;
            let [tenant, counts, oldest, messages] = row.as_slice() else {
                return Err(corrupt("reply"));
            };
            let tenant = text(tenant)
                .and_then(|t| TenantId::new(t).ok())
                .ok_or_else(|| corrupt("reply"))?;
            let messages = int(messages)
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| corrupt("reply"))?;
            let entry = all
                .entry(tenant.as_str().to_owned())
                .or_insert_with(|| TenantStats {
                    tenant,
                    stats: Stats::default(),
                    messages: 0,
                });
            add_stats(&mut entry.stats, counts, oldest, now)?;
            entry.messages += messages;
        }
    }
    Ok(all.into_values().collect())
}
