//! The ledger: a delivery's attempts, and retention (purging finished deliveries and their
//! messages, per tenant in rotation).

use std::collections::BTreeMap;

use outboxkit_core::{
    Attempt, DeliveryId, Error, PayloadFingerprint, PurgeReport, RetentionCutoffs, TenantId,
    Timestamp,
};
use rusqlite::{params, Connection, OptionalExtension};

use crate::deliveries;
use crate::error::{Result, SqliteError};
use crate::rows::{self, ms};
use crate::store::SqliteStore;
use crate::tenancy;
use async_trait::async_trait;
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::Delivery;
use outboxkit_core::DeliveryFilter;
use outboxkit_core::Ledger;
use outboxkit_core::Message;
use outboxkit_core::MessageId;
use outboxkit_core::Page;
use outboxkit_core::PageRequest;
use outboxkit_core::TenantStats;

/// A delivery's attempts: its ledger rows and the attempt its row holds, if it does (schema
/// 16, `settle::folds`: the row's `last_*` columns are that attempt's record).
const ATTEMPTS: &str = "SELECT d.id, a.number, a.probe, a.started_at, \
     a.finished_at, a.outcome, a.status_code, a.excerpt, a.run, a.scheduled_at, a.detail \
     FROM outbox_attempts AS a JOIN outbox_deliveries AS d ON d.seq = a.delivery_seq \
     WHERE d.id = ?1 \
     UNION ALL \
     SELECT d.id, d.attempt_count, d.folded_probe, d.folded_started_at, d.last_at, \
            d.last_outcome, d.last_status_code, d.last_excerpt, d.run, d.due_at, d.folded_detail \
     FROM outbox_deliveries AS d WHERE d.id = ?1 AND d.folded_started_at IS NOT NULL \
     ORDER BY 2";

/// The payload of a delivery's message (the attempts' fingerprint).
const DELIVERY_PAYLOAD: &str = "SELECT m.payload FROM outbox_messages AS m \
     JOIN outbox_deliveries AS d ON d.message_id = m.id WHERE d.id = ?1";

/// A delivery's attempts in order; another tenant's delivery is `NotFound`.
pub(crate) fn attempts(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
) -> Result<Vec<Attempt>> {
    let exists: Option<String> = conn
        .prepare_cached(crate::deliveries::DELIVERY_STATUS)?
        .query_row(params![id.to_string(), tenant.as_str()], |r| r.get(0))
        .optional()?;
    if exists.is_none() {
        return Err(Error::not_found("delivery").into());
    }
    let payload: Vec<u8> = conn
        .prepare_cached(DELIVERY_PAYLOAD)?
        .query_row([id.to_string()], |r| r.get(0))
        .optional()?
        .unwrap_or_default();
    let payload = PayloadFingerprint::of(&payload);
    let mut stmt = conn.prepare_cached(ATTEMPTS)?;
    rows::collect(&mut stmt, [id.to_string()], |r| rows::attempt(r, &payload))
}

/// The first tenant after `?2` with a finished delivery completed before its cutoff: the
/// tenant's entry in the JSON object `?3`, else `?1`.
const PURGE_NEXT_TENANT_DELIVERIES: &str = "SELECT d.tenant FROM outbox_deliveries AS d \
     WHERE d.status IN ('succeeded', 'dead') AND d.tenant > ?2 \
       AND d.completed_at < coalesce((SELECT value FROM json_each(?3) WHERE key = d.tenant), ?1) \
     ORDER BY d.tenant LIMIT 1";

/// The first tenant after `?2` with a message created before its cutoff (as above) and no
/// deliveries left.
const PURGE_NEXT_TENANT_MESSAGES: &str = "SELECT m.tenant FROM outbox_messages AS m \
     WHERE m.tenant > ?2 \
       AND m.created_at < coalesce((SELECT value FROM json_each(?3) WHERE key = m.tenant), ?1) \
       AND NOT EXISTS (SELECT 1 FROM outbox_deliveries AS d \
                       WHERE d.seq BETWEEN m.first_seq AND m.last_seq AND d.message_id = m.id) \
     ORDER BY m.tenant LIMIT 1";

/// The first tenant after `after` (exclusive) with something to purge before its cutoff.
fn next_tenant(
    conn: &Connection,
    default: i64,
    overrides: &str,
    after: &str,
) -> Result<Option<String>> {
    let from_deliveries: Option<String> = conn
        .prepare_cached(PURGE_NEXT_TENANT_DELIVERIES)?
        .query_row(params![default, after, overrides], |r| r.get(0))
        .optional()?;
    let from_messages: Option<String> = conn
        .prepare_cached(PURGE_NEXT_TENANT_MESSAGES)?
        .query_row(params![default, after, overrides], |r| r.get(0))
        .optional()?;
    Ok(match (from_deliveries, from_messages) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

const PURGE_CURSOR: &str = "SELECT tenant FROM outbox_purge_cursor WHERE id = 1";

const PURGE_SET_CURSOR: &str = "INSERT INTO outbox_purge_cursor (id, tenant) \
     VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant";

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
        .prepare_cached(PURGE_CURSOR)?
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
    conn.prepare_cached(PURGE_SET_CURSOR)?
        .execute([tenant.as_str()])?;
    Ok(report)
}

const PURGE_PICK_DELIVERIES: &str = "SELECT seq FROM outbox_deliveries \
     WHERE tenant = ?1 AND status IN ('succeeded', 'dead') AND completed_at < ?2 \
     ORDER BY completed_at, seq LIMIT ?3";

const PURGE_DELETE_ATTEMPTS: &str =
    "DELETE FROM outbox_attempts WHERE delivery_seq IN (SELECT value FROM json_each(?1))";

const PURGE_DELETE_DELIVERIES: &str =
    "DELETE FROM outbox_deliveries WHERE seq IN (SELECT value FROM json_each(?1))";

const PURGE_DELETE_MESSAGES: &str = "DELETE FROM outbox_messages WHERE id IN ( \
       SELECT m.id FROM outbox_messages AS m \
       WHERE m.tenant = ?1 AND m.created_at < ?2 \
         AND NOT EXISTS (SELECT 1 FROM outbox_deliveries AS d \
                       WHERE d.seq BETWEEN m.first_seq AND m.last_seq AND d.message_id = m.id) \
       ORDER BY m.created_at, m.id LIMIT ?3)";

/// One tenant's retention, outside the rotation.
pub(crate) fn purge_tenant(
    conn: &Connection,
    tenant: &TenantId,
    before: Timestamp,
    limit: u32,
) -> Result<PurgeReport> {
    let before = ms(before);
    let mut stmt = conn.prepare_cached(PURGE_PICK_DELIVERIES)?;
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
        conn.prepare_cached(PURGE_DELETE_ATTEMPTS)?
            .execute([&ids])?;
        deliveries = conn
            .prepare_cached(PURGE_DELETE_DELIVERIES)?
            .execute([&ids])? as u64;
    }
    let messages = conn
        .prepare_cached(PURGE_DELETE_MESSAGES)?
        .execute(params![tenant.as_str(), before, limit])? as u64;
    Ok(PurgeReport {
        deliveries,
        messages,
        tenant: Some(tenant.clone()),
    })
}

#[async_trait]
impl Ledger for SqliteStore {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> outboxkit_core::Result<Page<Delivery>> {
        page.validate()?;
        filter.validate()?;
        let (tenant, filter) = (tenant.clone(), filter.clone());
        self.read(move |tx, _| deliveries::list_deliveries(tx, &tenant, &filter, page))
            .await
    }

    async fn get_delivery(
        &self,
        tenant: &TenantId,
        id: DeliveryId,
    ) -> outboxkit_core::Result<Delivery> {
        let tenant = tenant.clone();
        self.read(move |tx, _| deliveries::get_delivery(tx, &tenant, id))
            .await
    }

    async fn get_message(
        &self,
        tenant: &TenantId,
        id: MessageId,
    ) -> outboxkit_core::Result<Message> {
        let tenant = tenant.clone();
        self.read(move |tx, _| deliveries::get_message(tx, &tenant, id))
            .await
    }

    async fn attempts(
        &self,
        tenant: &TenantId,
        delivery: DeliveryId,
    ) -> outboxkit_core::Result<Vec<Attempt>> {
        let tenant = tenant.clone();
        self.read(move |tx, _| self::attempts(tx, &tenant, delivery))
            .await
    }

    async fn purge_expired(
        &self,
        cutoffs: &RetentionCutoffs,
        limit: u32,
    ) -> outboxkit_core::Result<PurgeReport> {
        check_purge_limit(limit)?;
        let cutoffs = cutoffs.clone();
        self.write(move |tx, _, _| self::purge_expired(tx, &cutoffs, limit))
            .await
    }

    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> outboxkit_core::Result<PurgeReport> {
        check_purge_limit(limit)?;
        let tenant = tenant.clone();
        self.write(move |tx, _, _| self::purge_tenant(tx, &tenant, before, limit))
            .await
    }

    async fn tenants(&self) -> outboxkit_core::Result<Vec<TenantStats>> {
        self.read(|tx, now| tenancy::tenants(tx, now)).await
    }
}
