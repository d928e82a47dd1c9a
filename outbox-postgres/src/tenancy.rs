//! Tenant-scoped counts: one tenant's (or one endpoint's) stats, and every tenant with its
//! counts. Operator calls, not the hot path: the statement text is built per call.

use outboxkit_core::{DeliveryStatus, EndpointId, Result, Stats, TenantId, TenantStats, Timestamp};
use sqlx::postgres::PgRow;

use crate::error::DbResult;
use crate::rows::{get, ms, ts_opt, UNFINISHED};
use crate::store::PostgresStore;

/// The per-status count columns over the rows a query groups.
fn count_cols() -> String {
    DeliveryStatus::ALL
        .iter()
        .map(|s| format!("count(*) FILTER (WHERE status = '{s}') AS {s}"))
        .collect::<Vec<_>>()
        .join(", ")
}

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

/// Counts of one tenant's deliveries (to one endpoint when given).
pub(crate) async fn tenant_stats(
    store: &PostgresStore,
    tenant: &TenantId,
    endpoint: Option<EndpointId>,
) -> Result<Stats> {
    let now = store.inner.clock.now();
    let (d, all) = (
        &store.inner.sql.tables.deliveries,
        &store.inner.sql.tables.all,
    );
    let scope =
        "tenant = $2::text AND ($3::text IS NULL OR (kind = 'webhook' AND target = $3::text))";
    let text = format!(
        "SELECT {cols}, \
                (SELECT min(next_attempt_at) FROM {d} \
                  WHERE {scope} AND status IN {UNFINISHED} AND next_attempt_at <= $1::int8) \
                  AS oldest \
           FROM {all} x WHERE {scope}",
        cols = count_cols(),
    );
    let row = sqlx::query(&text)
        .bind(ms(now))
        .bind(tenant.as_str())
        .bind(endpoint.map(|e| e.to_string()))
        .fetch_one(&store.inner.pool)
        .await
        .db()?;
    stats_from(&row, now)
}

/// Every tenant with deliveries or messages, by name, with its counts.
pub(crate) async fn tenants(store: &PostgresStore) -> Result<Vec<TenantStats>> {
    let now = store.inner.clock.now();
    let s = &store.inner.sql.tables.schema;
    let all = &store.inner.sql.tables.all;
    let text = format!(
        "SELECT t.tenant, c.*, coalesce(m.n, 0) AS messages \
           FROM (SELECT tenant FROM {all} x UNION SELECT tenant FROM {s}.messages) t \
           LEFT JOIN (SELECT tenant AS c_tenant, {cols}, \
                             min(next_attempt_at) FILTER (WHERE status IN {UNFINISHED} \
                                                            AND next_attempt_at <= $1::int8) \
                               AS oldest \
                        FROM {all} x GROUP BY tenant) c ON c.c_tenant = t.tenant \
           LEFT JOIN (SELECT tenant AS m_tenant, count(*) AS n FROM {s}.messages \
                       GROUP BY tenant) m ON m.m_tenant = t.tenant \
          ORDER BY t.tenant",
        cols = count_cols(),
    );
    let rows = sqlx::query(&text)
        .bind(ms(now))
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
