//! `take_permits`: the endpoint's grants of the last second, read and rewritten in the
//! writer's `BEGIN IMMEDIATE` transaction (so every process on the file shares them), by
//! core's [`PermitLog::take`] rule.

use outboxkit_core::{EndpointId, PermitLog, Permits, TenantId, Timestamp};
use rusqlite::{params, OptionalExtension, Transaction};

use crate::error::{Result, SqliteError};

const READ: &str =
    "SELECT grants FROM outbox_endpoint_permits WHERE tenant = ?1 AND endpoint_id = ?2";
const WRITE: &str = "INSERT INTO outbox_endpoint_permits (tenant, endpoint_id, grants) \
     VALUES (?1, ?2, ?3) \
     ON CONFLICT (tenant, endpoint_id) DO UPDATE SET grants = excluded.grants";
const FORGET: &str = "DELETE FROM outbox_endpoint_permits WHERE tenant = ?1 AND endpoint_id = ?2";

/// Take up to `want` permits at `now` (the caller's clock) under `rate` per second.
pub(crate) fn take(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    endpoint: EndpointId,
    rate: u32,
    want: u32,
    now: Timestamp,
) -> Result<Permits> {
    let id = endpoint.to_string();
    let stored: Option<Vec<u8>> = tx
        .prepare_cached(READ)?
        .query_row(params![tenant.as_str(), id], |r| r.get(0))
        .optional()?;
    let had_row = stored.is_some();
    let mut log = match stored {
        Some(bytes) => {
            PermitLog::from_bytes(&bytes).map_err(|_| SqliteError::Corrupt("permit log"))?
        }
        None => PermitLog::default(),
    };
    let before = log.clone();
    let permits = log.take(rate, want, now);
    if log.is_empty() {
        if had_row {
            tx.prepare_cached(FORGET)?
                .execute(params![tenant.as_str(), id])?;
        }
    } else if log != before || !had_row {
        tx.prepare_cached(WRITE)?
            .execute(params![tenant.as_str(), id, log.to_bytes()])?;
    }
    Ok(permits)
}
