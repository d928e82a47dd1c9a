//! Tenant-scoped counts: one tenant's (or one endpoint's) stats, and every tenant with its
//! counts. Operator calls, not the hot path (statements in `sql/`).

use outboxkit_core::{DeliveryStatus, EndpointId, Result, Stats, TenantId, TenantStats, Timestamp};
use sqlx::postgres::PgRow;

use crate::error::DbResult;
use crate::rows::{get, ms, ts_opt};
use crate::sql::Params;
use crate::store::PostgresStore;

fn stats_from(row: &PgRow, now: Timestamp) -> Result<Stats> {
    let mut stats = Stats::default();
    for status in DeliveryStatus::ALL {
        let n: Option<i64> = get(row, status.as_str())?;
        stats.add(status, u64::try_from(n.unwrap_or(0)).unwrap_or(0));
    }
    stats.oldest_due_at = ts_opt(row, "oldest")?;
    stats.oldest_due_age = stats.oldest_due_at.map(|t| now.duration_since(t));
    Ok(stats)
}

/// Counts of one tenant's deliveries (to one endpoint when given): `tenant_stats` of
/// `sql/deliveries.sql`.
pub(crate) async fn tenant_stats(
    store: &PostgresStore,
    tenant: &TenantId,
    endpoint: Option<EndpointId>,
) -> Result<Stats> {
    let now = store.inner.clock.now();
    let params = Params::new()
        .set("now", ms(now))
        .set("tenant", tenant.as_str())
        .set("endpoint", endpoint.map(|e| e.to_string()));
    let row = (store.inner.sql.deliveries.tenant_stats.bind(params)?)
        .fetch_one(&store.inner.pool)
        .await
        .db()?;
    stats_from(&row, now)
}

/// Every tenant with deliveries or messages, by name, with its counts: `tenants` of
/// `sql/ledger.sql`.
pub(crate) async fn tenants(store: &PostgresStore) -> Result<Vec<TenantStats>> {
    let now = store.inner.clock.now();
    let params = Params::new().set("now", ms(now));
    let rows = (store.inner.sql.ledger.tenants.bind(params)?)
        .fetch_all(&store.inner.pool)
        .await
        .db()?;
    rows.iter()
        .map(|row| {
            let messages: i64 = get(row, "messages")?;
            Ok(TenantStats {
                tenant: TenantId::new(get::<String>(row, "tenant")?)?,
                stats: stats_from(row, now)?,
                messages: u64::try_from(messages).unwrap_or(0),
            })
        })
        .collect()
}
