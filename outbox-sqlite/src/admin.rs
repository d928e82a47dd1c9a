//! Operator calls, stats, endpoints and consumers.

use outboxkit_core::{
    Consumer, ConsumerName, DeliveryId, DeliveryStatus, Endpoint, EndpointId, EndpointUpdate,
    Error, Stats, TenantId, Timestamp,
};
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Result, SqliteError};
use crate::rows::{self, ms};
use crate::sql;

/// Make the endpoint's held deliveries pending and due now.
pub(crate) fn release_held(
    conn: &Connection,
    tenant: &TenantId,
    endpoint: EndpointId,
    now: Timestamp,
) -> Result<u64> {
    let n = conn.prepare_cached(sql::RELEASE_HELD)?.execute(params![
        tenant.as_str(),
        endpoint.to_string(),
        ms(now)
    ])?;
    Ok(n as u64)
}

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
        .prepare_cached(sql::DELIVERY_STATUS)?
        .query_row(params![id.to_string(), tenant.as_str()], |r| r.get(0))
        .optional()?;
    match status {
        None => Err(Error::not_found("delivery").into()),
        Some(_) => Err(Error::new(outboxkit_core::ErrorKind::Conflict, conflict).into()),
    }
}

/// Give a dead delivery a fresh budget, due now.
pub(crate) fn replay(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
) -> Result<()> {
    guarded(
        conn,
        sql::REPLAY,
        tenant,
        id,
        now,
        "only a dead delivery can be replayed",
    )
}

/// Make a pending or held delivery due now.
pub(crate) fn retry_now(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
) -> Result<()> {
    guarded(
        conn,
        sql::RETRY_NOW,
        tenant,
        id,
        now,
        "only a pending or held delivery can be retried now",
    )
}

/// Reset a held delivery to a fresh budget, due now.
pub(crate) fn reset(
    conn: &Connection,
    tenant: &TenantId,
    id: DeliveryId,
    now: Timestamp,
) -> Result<()> {
    guarded(
        conn,
        sql::RESET,
        tenant,
        id,
        now,
        "only a held delivery can be reset",
    )
}

/// Counts per status and the oldest due delivery.
pub(crate) fn stats(conn: &Connection, now: Timestamp) -> Result<Stats> {
    let mut stats = Stats::default();
    let mut stmt = conn.prepare_cached(sql::STATS_COUNTS)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let status: String = row.get(0)?;
        let n: i64 = row.get(1)?;
        let status =
            DeliveryStatus::parse(&status).map_err(|_| SqliteError::Corrupt("delivery"))?;
        stats.add(status, u64::try_from(n).unwrap_or(0));
    }
    let oldest: Option<i64> = conn
        .prepare_cached(sql::STATS_OLDEST_DUE)?
        .query_row([ms(now)], |r| r.get(0))?;
    if let Some(o) = oldest {
        let o = Timestamp::from_unix_millis(o).map_err(|_| SqliteError::Corrupt("delivery"))?;
        stats.oldest_due_at = Some(o);
        stats.oldest_due_age = Some(now.duration_since(o));
    }
    Ok(stats)
}

fn endpoint_params(e: &Endpoint) -> [Box<dyn rusqlite::ToSql + '_>; 13] {
    [
        Box::new(e.id.to_string()),
        Box::new(e.tenant.as_str()),
        Box::new(e.url.as_str()),
        Box::new(e.description.as_str()),
        Box::new(e.filter.to_string()),
        Box::new(e.status.as_str()),
        Box::new(e.status.reason().map(|r| r.as_str())),
        Box::new(e.secret.0.as_slice()),
        Box::new(e.previous_secret.as_ref().map(|s| s.0.as_slice())),
        Box::new(e.body_format.as_str()),
        Box::new(e.rate_limit),
        Box::new(ms(e.created_at)),
        Box::new(ms(e.updated_at)),
    ]
}

/// Store a new endpoint; an existing id is a `Conflict`.
pub(crate) fn create_endpoint(conn: &Connection, e: &Endpoint) -> Result<()> {
    outboxkit_core::endpoint::check_description(&e.description)?;
    outboxkit_core::endpoint::check_rate_limit(e.rate_limit)?;
    let p = endpoint_params(e);
    conn.prepare_cached(sql::INSERT_ENDPOINT)?
        .execute(rusqlite::params_from_iter(p.iter()))?;
    Ok(())
}

/// One endpoint of a tenant.
pub(crate) fn get_endpoint(
    conn: &Connection,
    tenant: &TenantId,
    id: EndpointId,
) -> Result<Endpoint> {
    let mut stmt = conn.prepare_cached(sql::GET_ENDPOINT)?;
    let mut rows = stmt.query(params![id.to_string(), tenant.as_str()])?;
    match rows.next()? {
        Some(row) => rows::endpoint(row),
        None => Err(Error::not_found("endpoint").into()),
    }
}

/// Every endpoint of a tenant, oldest first.
pub(crate) fn list_endpoints(conn: &Connection, tenant: &TenantId) -> Result<Vec<Endpoint>> {
    let mut stmt = conn.prepare_cached(sql::SELECT_TENANT_ENDPOINTS)?;
    rows::collect(&mut stmt, [tenant.as_str()], rows::endpoint)
}

/// Apply an update (and release held deliveries when it changes the URL or secret).
/// Returns the endpoint as stored and whether held deliveries were released.
pub(crate) fn update_endpoint(
    conn: &Connection,
    tenant: &TenantId,
    id: EndpointId,
    update: &EndpointUpdate,
    now: Timestamp,
) -> Result<(Endpoint, u64)> {
    update.validate()?;
    let mut e = get_endpoint(conn, tenant, id)?;
    update.apply(&mut e, now);
    conn.prepare_cached(sql::UPDATE_ENDPOINT)?
        .execute(rusqlite::params_from_iter(endpoint_params(&e).iter()))?;
    let released = if update.releases_held() {
        release_held(conn, tenant, id, now)?
    } else {
        0
    };
    if let Some(until) = update.holds_until(now) {
        conn.prepare_cached(sql::HOLD_FOR_ENDPOINT)?
            .execute(params![tenant.as_str(), id.to_string(), ms(until), ms(now)])?;
    }
    Ok((e, released))
}

/// Remove an endpoint of a tenant; its held deliveries become due so the next claim ends
/// them (`endpoint-removed`). Returns how many were released.
pub(crate) fn delete_endpoint(
    conn: &Connection,
    tenant: &TenantId,
    id: EndpointId,
    now: Timestamp,
) -> Result<u64> {
    let n = conn
        .prepare_cached(sql::DELETE_ENDPOINT)?
        .execute(params![id.to_string(), tenant.as_str()])?;
    if n == 0 {
        return Err(Error::not_found("endpoint").into());
    }
    release_held(conn, tenant, id, now)
}

/// Register or replace a consumer by name.
pub(crate) fn put_consumer(conn: &Connection, c: &Consumer) -> Result<()> {
    conn.prepare_cached(sql::UPSERT_CONSUMER)?.execute(params![
        c.name.as_str(),
        c.filter.to_string(),
        ms(c.created_at)
    ])?;
    Ok(())
}

/// Every consumer, by name.
pub(crate) fn list_consumers(conn: &Connection) -> Result<Vec<Consumer>> {
    let mut stmt = conn.prepare_cached(sql::SELECT_CONSUMERS)?;
    rows::collect(&mut stmt, rusqlite::params![], rows::consumer)
}

/// Remove a consumer.
pub(crate) fn delete_consumer(conn: &Connection, name: &ConsumerName) -> Result<()> {
    let n = conn
        .prepare_cached(sql::DELETE_CONSUMER)?
        .execute([name.as_str()])?;
    if n == 0 {
        return Err(Error::not_found("consumer").into());
    }
    Ok(())
}
