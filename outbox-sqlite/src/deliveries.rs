//! Operator reads and changes on deliveries: list, show, replay, retry now,
//! reset, cancel, release of held deliveries, stats.

use outboxkit_core::{
    CancelReport, Cursor, Delivery, DeliveryFilter, DeliveryId, DeliveryStatus, EndpointId, Error,
    Message, MessageId, Page, PageRequest, Stats, TenantId, Timestamp,
};
use rusqlite::{named_params, params, Connection, OptionalExtension};

use crate::error::{Result, SqliteError};
use crate::rows::{self, ms};
use crate::store::SqliteStore;
use crate::tenancy;
use async_trait::async_trait;
use outboxkit_core::OperatorStore;

const RELEASE_HELD: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', updated_at = ?3, next_attempt_at = MAX(?3, coalesce(( \
         SELECT m.available_at FROM outbox_messages AS m \
          WHERE m.id = outbox_deliveries.message_id), ?3)) \
     WHERE grp = (SELECT id FROM outbox_groups \
                   WHERE tenant = ?1 AND kind = 'webhook' AND target = ?2) \
       AND status = 'held' AND status NOT IN ('succeeded', 'dead')";

/// Make the endpoint's held deliveries pending, due at the later of now and their message's
/// `available_at` (a delayed message published during a pause keeps its time).
pub(crate) fn release_held(
    conn: &Connection,
    tenant: &TenantId,
    endpoint: EndpointId,
    now: Timestamp,
) -> Result<u64> {
    let n = conn.prepare_cached(RELEASE_HELD)?.execute(params![
        tenant.as_str(),
        endpoint.to_string(),
        ms(now)
    ])?;
    Ok(n as u64)
}

pub(crate) const DELIVERY_STATUS: &str =
    "SELECT status FROM outbox_deliveries WHERE id = ?1 AND tenant = ?2";

/// Apply a guarded status change (`replay`, `retry_now`): `NotFound` when the tenant has no
/// such delivery, `Conflict` when its status does not allow the change.
fn guarded(
    conn: &Connection,
    statement: &str,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
    conflict: &'static str,
) -> Result<()> {
    let n = conn.prepare_cached(statement)?.execute(params![
        id.to_string(),
        tenant.as_str(),
        ms(now)
    ])?;
    if n > 0 {
        return Ok(());
    }
    let status: Option<String> = conn
        .prepare_cached(DELIVERY_STATUS)?
        .query_row(params![id.to_string(), tenant.as_str()], |r| r.get(0))
        .optional()?;
    match status {
        None => Err(Error::not_found("delivery").into()),
        Some(_) => Err(Error::new(outboxkit_core::ErrorKind::Conflict, conflict).into()),
    }
}

/// A dead delivery's attempt kept in its row (schema 16, `settle::folds`), written to the
/// ledger before a replay changes the row: its number, run and scheduled time are the row's
/// `attempt_count`, `run` and `due_at`, its record the row's `last_*` columns.
const UNFOLD: &str = "INSERT INTO outbox_attempts \
     (delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt, run, \
      scheduled_at, detail) \
     SELECT seq, attempt_count, folded_probe, folded_started_at, last_at, last_outcome, \
            last_status_code, last_excerpt, run, due_at, folded_detail \
     FROM outbox_deliveries \
     WHERE id = ?1 AND tenant = ?2 AND status = 'dead' AND folded_started_at IS NOT NULL";

const REPLAY: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', attempts = 0, snoozes = 0, next_attempt_at = ?3, \
         dead_reason = NULL, completed_at = NULL, updated_at = ?3, run = run + 1, \
         folded_started_at = NULL, folded_probe = NULL, folded_detail = NULL, \
         barrier = CASE WHEN EXISTS (SELECT 1 FROM outbox_endpoints AS e \
                                      WHERE kind = 'webhook' AND e.id = target \
                                        AND e.tenant = outbox_deliveries.tenant AND e.fifo = 1) \
                        THEN ' fifo' ELSE ordering_key END \
     WHERE id = ?1 AND tenant = ?2 AND status = 'dead'";

/// Give a dead delivery a fresh budget, due now, and its barrier key with the endpoint's
/// FIFO flag as it is now (core's `barrier_key`).
pub(crate) fn replay(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
) -> Result<()> {
    conn.prepare_cached(UNFOLD)?
        .execute(params![id.to_string(), tenant.as_str()])?;
    guarded(
        conn,
        REPLAY,
        tenant,
        id,
        now,
        "only a dead delivery can be replayed",
    )
}

const RETRY_NOW: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', next_attempt_at = ?3, updated_at = ?3 \
     WHERE id = ?1 AND tenant = ?2 AND status IN ('pending', 'held')";

/// Make a pending or held delivery due now.
pub(crate) fn retry_now(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
) -> Result<()> {
    guarded(
        conn,
        RETRY_NOW,
        tenant,
        id,
        now,
        "only a pending or held delivery can be retried now",
    )
}

const RESET: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', attempts = 0, snoozes = 0, next_attempt_at = ?3, updated_at = ?3 \
     WHERE id = ?1 AND tenant = ?2 AND status = 'held'";

/// Reset a held delivery to a fresh budget, due now.
pub(crate) fn reset(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
) -> Result<()> {
    guarded(
        conn,
        RESET,
        tenant,
        id,
        now,
        "only a held delivery can be reset",
    )
}

/// A waiting delivery becomes finished `dead` (`cancelled`), attempts and ledger kept.
const CANCEL: &str = "UPDATE outbox_deliveries \
     SET status = 'dead', dead_reason = 'cancelled', completed_at = ?3, next_attempt_at = ?3, \
         updated_at = ?3, claim_token = NULL, lease_until = NULL, claimed_from = NULL \
     WHERE id = ?1 AND tenant = ?2 AND status IN ('pending', 'held')";

/// Cancel a pending or held delivery: `NotFound` when the tenant has no such delivery, a
/// `Conflict` naming why (in flight, finished) otherwise; nothing changes on an error.
pub(crate) fn cancel(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
) -> Result<()> {
    let n =
        conn.prepare_cached(CANCEL)?
            .execute(params![id.to_string(), tenant.as_str(), ms(now)])?;
    if n > 0 {
        return Ok(());
    }
    let status: Option<String> = conn
        .prepare_cached(DELIVERY_STATUS)?
        .query_row(params![id.to_string(), tenant.as_str()], |r| r.get(0))
        .optional()?;
    let status = status.ok_or_else(|| Error::not_found("delivery"))?;
    let status = DeliveryStatus::parse(&status).map_err(|_| SqliteError::Corrupt("delivery"))?;
    status.check_cancel()?;
    Err(SqliteError::Corrupt("delivery"))
}

const MESSAGE_OF_TENANT: &str = "SELECT 1 FROM outbox_messages WHERE id = ?1 AND tenant = ?2";

const CANCEL_MESSAGE: &str = "UPDATE outbox_deliveries \
     SET status = 'dead', dead_reason = 'cancelled', completed_at = ?3, next_attempt_at = ?3, \
         updated_at = ?3, claim_token = NULL, lease_until = NULL, claimed_from = NULL \
     WHERE seq BETWEEN (SELECT first_seq FROM outbox_messages WHERE id = ?1) \
                   AND (SELECT last_seq FROM outbox_messages WHERE id = ?1) \
       AND message_id = ?1 AND tenant = ?2 AND status IN ('pending', 'held')";

/// A message's deliveries: the `seq` range it recorded (schema 15), each checked by id.
const MESSAGE_DELIVERIES: &str = "SELECT count(*) FROM outbox_deliveries \
     WHERE seq BETWEEN (SELECT first_seq FROM outbox_messages WHERE id = ?1) \
                   AND (SELECT last_seq FROM outbox_messages WHERE id = ?1) \
       AND message_id = ?1 AND tenant = ?2";

/// Cancel every pending or held delivery of a tenant's message (in the caller's
/// transaction); the others are counted as skipped.
pub(crate) fn cancel_message(
    conn: &Connection,
    tenant: &TenantId,
    id: MessageId,
    now: Timestamp,
) -> Result<CancelReport> {
    let args = params![id.to_string(), tenant.as_str()];
    let found = conn
        .prepare_cached(MESSAGE_OF_TENANT)?
        .query_row(args, |_| Ok(()))
        .optional()?;
    if found.is_none() {
        return Err(Error::not_found("message").into());
    }
    let total: i64 = conn
        .prepare_cached(MESSAGE_DELIVERIES)?
        .query_row(args, |r| r.get(0))?;
    let cancelled = conn.prepare_cached(CANCEL_MESSAGE)?.execute(params![
        id.to_string(),
        tenant.as_str(),
        ms(now)
    ])? as u64;
    Ok(CancelReport {
        cancelled,
        skipped: u64::try_from(total).unwrap_or(0).saturating_sub(cancelled),
    })
}

const STATS_COUNTS: &str = "SELECT status, count(*) FROM outbox_deliveries GROUP BY status";

const STATS_OLDEST_DUE: &str = "SELECT min(next_attempt_at) FROM outbox_deliveries \
     WHERE status NOT IN ('succeeded', 'dead') AND next_attempt_at <= ?1";

/// Counts per unfinished status, through the claim index (unfinished rows only), so the
/// finished history is never read.
const QUEUE_STATS_COUNTS: &str = "SELECT status, count(*) FROM outbox_deliveries \
     INDEXED BY outbox_deliveries_claim \
     WHERE status NOT IN ('succeeded', 'dead') GROUP BY status";

/// Counts per status and the oldest due delivery.
pub(crate) fn stats(conn: &Connection, now: Timestamp) -> Result<Stats> {
    counted(conn, STATS_COUNTS, now)
}

/// [`stats`] over unfinished deliveries only (`OperatorStore::queue_stats`).
pub(crate) fn queue_stats(conn: &Connection, now: Timestamp) -> Result<Stats> {
    counted(conn, QUEUE_STATS_COUNTS, now)
}

/// The counts of `counts` (status, count rows) and the oldest due delivery.
fn counted(conn: &Connection, counts: &str, now: Timestamp) -> Result<Stats> {
    let mut stats = Stats::default();
    let mut stmt = conn.prepare_cached(counts)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let status: String = row.get(0)?;
        let n: i64 = row.get(1)?;
        let status =
            DeliveryStatus::parse(&status).map_err(|_| SqliteError::Corrupt("delivery"))?;
        stats.add(status, u64::try_from(n).unwrap_or(0));
    }
    let oldest: Option<i64> = conn
        .prepare_cached(STATS_OLDEST_DUE)?
        .query_row([ms(now)], |r| r.get(0))?;
    if let Some(o) = oldest {
        let o = Timestamp::from_unix_millis(o).map_err(|_| SqliteError::Corrupt("delivery"))?;
        stats.oldest_due_at = Some(o);
        stats.oldest_due_age = Some(now.duration_since(o));
    }
    Ok(stats)
}

/// A page of a tenant's deliveries, newest first: the tenant's messages newest first (their
/// retention index), each message's deliveries (the `seq` range it recorded). A delivery's
/// `created_at` is its message's, so this is the order of (created_at, id) the cursor
/// continues.
const LIST_DELIVERIES: &str = "SELECT d.id, d.message_id, d.tenant, d.topic, d.ordering_key, \
         d.kind, d.target, d.status, d.attempts, d.snoozes, d.next_attempt_at, d.lease_until, \
         d.last_outcome, d.last_status_code, d.last_excerpt, d.last_at, d.dead_reason, \
         d.created_at, d.updated_at, d.completed_at, d.run \
     FROM outbox_messages AS m JOIN outbox_deliveries AS d \
       ON d.seq BETWEEN m.first_seq AND m.last_seq AND d.message_id = m.id \
     WHERE m.tenant = :tenant AND d.tenant = :tenant \
       AND (:status IS NULL OR d.status = :status) \
       AND (:endpoint IS NULL OR (d.kind = 'webhook' AND d.target = :endpoint)) \
       AND (:consumer IS NULL OR (d.kind = 'handler' AND d.target = :consumer)) \
       AND (:kind IS NULL OR d.kind = :kind) \
       AND (:topic IS NULL OR d.topic = :topic) \
       AND (:since IS NULL OR m.created_at >= :since) \
       AND (:until IS NULL OR m.created_at < :until) \
       AND (:okey IS NULL OR d.ordering_key = :okey) \
       AND (:text IS NULL \
         OR instr(lower(d.last_excerpt), :text) > 0 \
         OR EXISTS (SELECT 1 FROM outbox_attempts AS a \
                    WHERE a.delivery_seq = d.seq AND instr(lower(a.excerpt), :text) > 0)) \
       AND (:cursor_at IS NULL OR (m.created_at, d.id) < (:cursor_at, :cursor_id)) \
     ORDER BY m.created_at DESC, d.id DESC \
     LIMIT :limit";

/// A page of a tenant's deliveries, newest first.
pub(crate) fn list_deliveries(
    conn: &Connection,
    tenant: &TenantId,
    filter: &DeliveryFilter,
    page: PageRequest,
) -> Result<Page<Delivery>> {
    let mut stmt = conn.prepare_cached(LIST_DELIVERIES)?;
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

const GET_DELIVERY: &str = concat!(
    "SELECT ",
    delivery_cols!(),
    " FROM outbox_deliveries WHERE id = ?1 AND tenant = ?2"
);

/// One delivery of a tenant.
pub(crate) fn get_delivery(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
) -> Result<Delivery> {
    let mut stmt = conn.prepare_cached(GET_DELIVERY)?;
    let mut rows = stmt.query(params![id.to_string(), tenant.as_str()])?;
    match rows.next()? {
        Some(row) => rows::delivery(row),
        None => Err(Error::not_found("delivery").into()),
    }
}

const GET_MESSAGE: &str = concat!(
    "SELECT ",
    message_cols!(),
    " FROM outbox_messages WHERE id = ?1 AND tenant = ?2"
);

/// One message of a tenant.
pub(crate) fn get_message(conn: &Connection, tenant: &TenantId, id: MessageId) -> Result<Message> {
    let mut stmt = conn.prepare_cached(GET_MESSAGE)?;
    let mut rows = stmt.query(params![id.to_string(), tenant.as_str()])?;
    match rows.next()? {
        Some(row) => rows::message(row),
        None => Err(Error::not_found("message").into()),
    }
}

#[async_trait]
impl OperatorStore for SqliteStore {
    async fn release_held(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
    ) -> outboxkit_core::Result<u64> {
        let tenant = tenant.clone();
        let n = self
            .write(move |tx, now, _| self::release_held(tx, &tenant, endpoint, now))
            .await?;
        self.wake_if(n > 0);
        Ok(n)
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> outboxkit_core::Result<()> {
        let tenant = tenant.clone();
        self.write(move |tx, now, _| self::replay(tx, &tenant, delivery, now))
            .await?;
        self.wake_if(true);
        Ok(())
    }

    async fn retry_now(
        &self,
        tenant: &TenantId,
        delivery: DeliveryId,
    ) -> outboxkit_core::Result<()> {
        let tenant = tenant.clone();
        self.write(move |tx, now, _| self::retry_now(tx, &tenant, delivery, now))
            .await?;
        self.wake_if(true);
        Ok(())
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> outboxkit_core::Result<()> {
        let tenant = tenant.clone();
        self.write(move |tx, now, _| self::reset(tx, &tenant, delivery, now))
            .await?;
        self.wake_if(true);
        Ok(())
    }

    async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> outboxkit_core::Result<()> {
        let tenant = tenant.clone();
        self.write(move |tx, now, _| self::cancel(tx, &tenant, delivery, now))
            .await?;
        // A later delivery of its ordering key may be claimable now.
        self.wake_if(true);
        Ok(())
    }

    async fn cancel_message(
        &self,
        tenant: &TenantId,
        message: MessageId,
    ) -> outboxkit_core::Result<CancelReport> {
        let tenant = tenant.clone();
        let report = self
            .write(move |tx, now, _| self::cancel_message(tx, &tenant, message, now))
            .await?;
        self.wake_if(report.cancelled > 0);
        Ok(report)
    }

    async fn stats(&self) -> outboxkit_core::Result<Stats> {
        self.read(|tx, now| self::stats(tx, now)).await
    }

    async fn queue_stats(&self) -> outboxkit_core::Result<Stats> {
        self.read(|tx, now| self::queue_stats(tx, now)).await
    }

    async fn tenant_stats(
        &self,
        tenant: &TenantId,
        endpoint: Option<EndpointId>,
    ) -> outboxkit_core::Result<Stats> {
        let tenant = tenant.clone();
        self.read(move |tx, now| tenancy::tenant_stats(tx, &tenant, endpoint, now))
            .await
    }
}
