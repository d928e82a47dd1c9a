//! What an operator reads, and retention.

use std::collections::BTreeMap;

use outboxkit_core::{
    Attempt, Cursor, Delivery, DeliveryFilter, DeliveryId, Error, Message, MessageId, Page,
    PageRequest, PayloadFingerprint, PurgeReport, RetentionCutoffs, TenantId, Timestamp,
};
use rusqlite::{named_params, params, Connection, OptionalExtension};

use crate::error::{Result, SqliteError};
use crate::rows::{self, ms};
use crate::sql;

/// A page of a tenant's deliveries, newest first.
pub(crate) fn list_deliveries(
    conn: &Connection,
    tenant: &TenantId,
    filter: &DeliveryFilter,
    page: PageRequest,
) -> Result<Page<Delivery>> {
    let mut stmt = conn.prepare_cached(sql::LIST_DELIVERIES)?;
    let params = named_params! {
        ":tenant": tenant.as_str(),
        ":status": filter.status.map(|s| s.as_str()),
        ":endpoint": filter.endpoint.map(|e| e.to_string()),
        ":consumer": filter.consumer.as_ref().map(|c| c.as_str()),
        ":kind": filter.kind.map(|k| k.as_str()),
        ":topic": filter.topic.as_ref().map(|t| t.as_str()),
        ":since": filter.since.map(ms),
        ":until": filter.until.map(ms),
        ":okey": filter.ordering_key.as_ref().map(|k| k.as_str()),
        ":text": filter.text.as_ref().map(|t| t.to_ascii_lowercase()),
        ":cursor_at": page.cursor.map(|c| ms(c.created_at)),
        ":cursor_id": page.cursor.map(|c| c.id.to_string()),
        ":limit": i64::from(page.limit) + 1,
    };
    let mut items = rows::collect(&mut stmt, params, rows::delivery)?;
    let more = items.len() > page.limit as usize;
    items.truncate(page.limit as usize);
    let next = if more {
        items.last().map(Cursor::after)
    } else {
        None
    };
    Ok(Page { items, next })
}

/// One delivery of a tenant.
pub(crate) fn get_delivery(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
) -> Result<Delivery> {
    let mut stmt = conn.prepare_cached(sql::GET_DELIVERY)?;
    let mut rows = stmt.query(params![id.to_string(), tenant.as_str()])?;
    match rows.next()? {
        Some(row) => rows::delivery(row),
        None => Err(Error::not_found("delivery").into()),
    }
}

/// One message of a tenant.
pub(crate) fn get_message(conn: &Connection, tenant: &TenantId, id: MessageId) -> Result<Message> {
    let mut stmt = conn.prepare_cached(sql::GET_MESSAGE)?;
    let mut rows = stmt.query(params![id.to_string(), tenant.as_str()])?;
    match rows.next()? {
        Some(row) => rows::message(row),
        None => Err(Error::not_found("message").into()),
    }
}

/// A delivery's attempts in order; another tenant's delivery is `NotFound`.
pub(crate) fn attempts(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
) -> Result<Vec<Attempt>> {
    let exists: Option<String> = conn
        .prepare_cached(sql::DELIVERY_STATUS)?
        .query_row(params![id.to_string(), tenant.as_str()], |r| r.get(0))
        .optional()?;
    if exists.is_none() {
        return Err(Error::not_found("delivery").into());
    }
    let payload: Vec<u8> = conn
        .prepare_cached(sql::DELIVERY_PAYLOAD)?
        .query_row([id.to_string()], |r| r.get(0))
        .optional()?
        .unwrap_or_default();
    let payload = PayloadFingerprint::of(&payload);
    let mut stmt = conn.prepare_cached(sql::ATTEMPTS)?;
    rows::collect(&mut stmt, [id.to_string()], |r| rows::attempt(r, &payload))
}

/// The first tenant after `after` (exclusive) with something to purge before its cutoff.
fn next_tenant(
    conn: &Connection,
    default: i64,
    overrides: &str,
    after: &str,
) -> Result<Option<String>> {
    let from_deliveries: Option<String> = conn
        .prepare_cached(sql::PURGE_NEXT_TENANT_DELIVERIES)?
        .query_row(params![default, after, overrides], |r| r.get(0))
        .optional()?;
    let from_messages: Option<String> = conn
        .prepare_cached(sql::PURGE_NEXT_TENANT_MESSAGES)?
        .query_row(params![default, after, overrides], |r| r.get(0))
        .optional()?;
    Ok(match (from_deliveries, from_messages) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

/// One retention pass for one tenant, in rotation, each tenant with its own cutoff
/// (ARCHITECTURE "Retention").
pub(crate) fn purge_expired(
    conn: &Connection,
    cutoffs: &RetentionCutoffs,
    limit: u32,
) -> Result<PurgeReport> {
    let default = ms(cutoffs.default);
    let overrides: BTreeMap<&str, i64> = cutoffs
        .tenants
        .iter()
        .map(|(t, c)| (t.as_str(), ms(*c)))
        .collect();
    let overrides =
        serde_json::to_string(&overrides).map_err(|_| SqliteError::Corrupt("cutoffs"))?;
    let cursor: Option<String> = conn
        .prepare_cached(sql::PURGE_CURSOR)?
        .query_row([], |r| r.get(0))
        .optional()?;
    let tenant = match &cursor {
        Some(c) => match next_tenant(conn, default, &overrides, c)? {
            Some(t) => Some(t),
            // Wrap around: every tenant name is non-empty, so "after ''" is "from the start".
            None => next_tenant(conn, default, &overrides, "")?,
        },
        None => next_tenant(conn, default, &overrides, "")?,
    };
    let Some(tenant) = tenant else {
        return Ok(PurgeReport::default());
    };
    let tenant = TenantId::new(tenant).map_err(|_| SqliteError::Corrupt("delivery"))?;
    let report = purge_tenant(conn, &tenant, cutoffs.before(&tenant), limit)?;
    conn.prepare_cached(sql::PURGE_SET_CURSOR)?
        .execute([tenant.as_str()])?;
    Ok(report)
}

/// One tenant's retention, outside the rotation.
pub(crate) fn purge_tenant(
    conn: &Connection,
    tenant: &TenantId,
    before: Timestamp,
    limit: u32,
) -> Result<PurgeReport> {
    let before = ms(before);
    let mut stmt = conn.prepare_cached(sql::PURGE_PICK_DELIVERIES)?;
    let mut rows = stmt.query(params![tenant.as_str(), before, limit])?;
    let mut ids: Vec<i64> = Vec::new();
    while let Some(row) = rows.next()? {
        ids.push(row.get(0)?);
    }
    drop(rows);
    drop(stmt);
    let mut deliveries = 0;
    if !ids.is_empty() {
        let ids = serde_json::to_string(&ids).map_err(|_| SqliteError::Corrupt("delivery"))?;
        conn.prepare_cached(sql::PURGE_DELETE_ATTEMPTS)?
            .execute([&ids])?;
        deliveries = conn
            .prepare_cached(sql::PURGE_DELETE_DELIVERIES)?
            .execute([&ids])? as u64;
    }
    let messages = conn
        .prepare_cached(sql::PURGE_DELETE_MESSAGES)?
        .execute(params![tenant.as_str(), before, limit])? as u64;
    Ok(PurgeReport {
        deliveries,
        messages,
        tenant: Some(tenant.clone()),
    })
}
