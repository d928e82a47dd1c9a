//! Tenant-scoped counts: one tenant's (or one endpoint's) stats, and every tenant with its
//! counts.

use std::collections::BTreeMap;

use outboxkit_core::{DeliveryStatus, EndpointId, Stats, TenantId, TenantStats, Timestamp};
use rusqlite::{params, Connection};

use crate::error::{Result, SqliteError};
use crate::rows::ms;

fn status(s: &str) -> Result<DeliveryStatus> {
    DeliveryStatus::parse(s).map_err(|_| SqliteError::Corrupt("delivery"))
}

fn time(ms: i64) -> Result<Timestamp> {
    Timestamp::from_unix_millis(ms).map_err(|_| SqliteError::Corrupt("delivery"))
}

fn set_oldest(stats: &mut Stats, oldest: Option<i64>, now: Timestamp) -> Result<()> {
    if let Some(o) = oldest {
        let o = time(o)?;
        stats.oldest_due_at = Some(o);
        stats.oldest_due_age = Some(now.duration_since(o));
    }
    Ok(())
}

/// Counts of one tenant (and one endpoint when `?2` is not NULL).
/// Unfinished rows through the claim index (one range per group of the tenant), finished
/// ones through the finished index (keyed by tenant first); no index covers every row of a
/// tenant.
const TENANT_STATS_COUNTS: &str = "SELECT status, count(*) FROM outbox_deliveries \
     INDEXED BY outbox_deliveries_claim \
     WHERE grp IN (SELECT id FROM outbox_groups WHERE tenant = ?1 \
                     AND (?2 IS NULL OR (kind = 'webhook' AND target = ?2))) \
       AND status NOT IN ('succeeded', 'dead') GROUP BY status \
     UNION ALL \
     SELECT status, count(*) FROM outbox_deliveries INDEXED BY outbox_deliveries_finished \
     WHERE tenant = ?1 AND status IN ('succeeded', 'dead') \
       AND (?2 IS NULL OR (kind = 'webhook' AND target = ?2)) GROUP BY status";

const TENANT_STATS_OLDEST_DUE: &str = "SELECT min(next_attempt_at) \
     FROM outbox_deliveries \
     WHERE grp IN (SELECT id FROM outbox_groups WHERE tenant = ?1 \
                     AND (?2 IS NULL OR (kind = 'webhook' AND target = ?2))) \
       AND status NOT IN ('succeeded', 'dead') AND next_attempt_at <= ?3";

/// Counts of one tenant's deliveries (to one endpoint when given).
pub(crate) fn tenant_stats(
    conn: &Connection,
    tenant: &TenantId,
    endpoint: Option<EndpointId>,
    now: Timestamp,
) -> Result<Stats> {
    let endpoint = endpoint.map(|e| e.to_string());
    let mut stats = Stats::default();
    let mut stmt = conn.prepare_cached(TENANT_STATS_COUNTS)?;
    let mut rows = stmt.query(params![tenant.as_str(), endpoint])?;
    while let Some(row) = rows.next()? {
        let n: i64 = row.get(1)?;
        stats.add(
            status(&row.get::<_, String>(0)?)?,
            u64::try_from(n).unwrap_or(0),
        );
    }
    drop(rows);
    let oldest: Option<i64> = conn
        .prepare_cached(TENANT_STATS_OLDEST_DUE)?
        .query_row(params![tenant.as_str(), endpoint, ms(now)], |r| r.get(0))?;
    set_oldest(&mut stats, oldest, now)?;
    Ok(stats)
}

/// Counts per tenant and status.
const TENANTS_COUNTS: &str =
    "SELECT tenant, status, count(*) FROM outbox_deliveries GROUP BY tenant, status";

/// The oldest due claimable delivery per tenant.
const TENANTS_OLDEST_DUE: &str = "SELECT tenant, min(next_attempt_at) \
     FROM outbox_deliveries \
     WHERE status NOT IN ('succeeded', 'dead') AND next_attempt_at <= ?1 \
     GROUP BY tenant";

/// Messages per tenant.
const TENANTS_MESSAGES: &str = "SELECT tenant, count(*) FROM outbox_messages GROUP BY tenant";

/// Every tenant with deliveries or messages, by name, with its counts.
pub(crate) fn tenants(conn: &Connection, now: Timestamp) -> Result<Vec<TenantStats>> {
    let mut by: BTreeMap<String, (Stats, u64)> = BTreeMap::new();
    let mut stmt = conn.prepare_cached(TENANTS_COUNTS)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let n: i64 = row.get(2)?;
        let entry = by.entry(row.get(0)?).or_default();
        entry.0.add(
            status(&row.get::<_, String>(1)?)?,
            u64::try_from(n).unwrap_or(0),
        );
    }
    drop(rows);
    drop(stmt);
    let mut stmt = conn.prepare_cached(TENANTS_OLDEST_DUE)?;
    let mut rows = stmt.query([ms(now)])?;
    while let Some(row) = rows.next()? {
        let entry = by.entry(row.get(0)?).or_default();
        set_oldest(&mut entry.0, row.get(1)?, now)?;
    }
    drop(rows);
    drop(stmt);
    let mut stmt = conn.prepare_cached(TENANTS_MESSAGES)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let n: i64 = row.get(1)?;
        by.entry(row.get(0)?).or_default().1 = u64::try_from(n).unwrap_or(0);
    }
    by.into_iter()
        .map(|(t, (stats, messages))| {
            Ok(TenantStats {
                tenant: TenantId::new(t).map_err(|_| SqliteError::Corrupt("delivery"))?,
                stats,
                messages,
            })
        })
        .collect()
}
