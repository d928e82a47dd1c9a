//! Endpoints and consumers (`EndpointStore`).

use outboxkit_core::endpoint_headers::encode_headers;
use outboxkit_core::{
    Consumer, ConsumerName, ConsumerStatus, Endpoint, EndpointId, EndpointUpdate, Error, TenantId,
    Timestamp,
};
use rusqlite::{params, Connection};

use crate::deliveries::release_held;
use crate::error::Result;
use crate::routes::{SELECT_CONSUMERS, SELECT_TENANT_ENDPOINTS};
use crate::rows::{self, ms};
use crate::store::SqliteStore;
use async_trait::async_trait;
use outboxkit_core::EndpointStore;

fn endpoint_params(e: &Endpoint) -> [Box<dyn rusqlite::ToSql + '_>; 15] {
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
        Box::new(i64::from(e.fifo)),
        Box::new(encode_headers(&e.headers)),
    ]
}

const INSERT_ENDPOINT: &str = concat!(
    "INSERT INTO outbox_endpoints (",
    endpoint_cols!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
);

/// Store a new endpoint; an existing id is a `Conflict`.
pub(crate) fn create_endpoint(conn: &Connection, e: &Endpoint) -> Result<()> {
    outboxkit_core::endpoint::check_description(&e.description)?;
    outboxkit_core::endpoint::check_rate_limit(e.rate_limit)?;
    outboxkit_core::endpoint::check_headers(&e.headers)?;
    let p = endpoint_params(e);
    conn.prepare_cached(INSERT_ENDPOINT)?
        .execute(rusqlite::params_from_iter(p.iter()))?;
    Ok(())
}

const GET_ENDPOINT: &str = concat!(
    "SELECT ",
    endpoint_read_cols!(),
    " FROM outbox_endpoints WHERE id = ?1 AND tenant = ?2"
);

/// One endpoint of a tenant.
pub(crate) fn get_endpoint(
    conn: &Connection,
    tenant: &TenantId,
    id: EndpointId,
) -> Result<Endpoint> {
    let mut stmt = conn.prepare_cached(GET_ENDPOINT)?;
    let mut rows = stmt.query(params![id.to_string(), tenant.as_str()])?;
    match rows.next()? {
        Some(row) => rows::endpoint(row),
        None => Err(Error::not_found("endpoint").into()),
    }
}

/// Every endpoint of a tenant, oldest first.
pub(crate) fn list_endpoints(conn: &Connection, tenant: &TenantId) -> Result<Vec<Endpoint>> {
    let mut stmt = conn.prepare_cached(SELECT_TENANT_ENDPOINTS)?;
    rows::collect(&mut stmt, [tenant.as_str()], rows::endpoint)
}

/// Make the endpoint's pending and held deliveries wait for it (a pause or disable).
const HOLD_FOR_ENDPOINT: &str = "UPDATE outbox_deliveries \
     SET status = 'held', next_attempt_at = ?3, updated_at = ?4 \
     WHERE grp = (SELECT id FROM outbox_groups \
                   WHERE tenant = ?1 AND kind = 'webhook' AND target = ?2) \
       AND status IN ('pending', 'held') AND status NOT IN ('succeeded', 'dead')";

const UPDATE_ENDPOINT: &str = "UPDATE outbox_endpoints \
     SET url = ?3, description = ?4, filter = ?5, status = ?6, disabled_reason = ?7, \
         secret = ?8, previous_secret = ?9, body_format = ?10, rate_limit = ?11, \
         created_at = ?12, updated_at = ?13, fifo = ?14, headers = ?15 \
     WHERE id = ?1 AND tenant = ?2";

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
    outboxkit_core::endpoint::check_headers(&e.headers)?;
    conn.prepare_cached(UPDATE_ENDPOINT)?
        .execute(rusqlite::params_from_iter(endpoint_params(&e).iter()))?;
    let released = if update.releases_held(&e.status) {
        release_held(conn, tenant, id, now)?
    } else {
        0
    };
    if let Some(until) = update.holds_until(now) {
        conn.prepare_cached(HOLD_FOR_ENDPOINT)?.execute(params![
            tenant.as_str(),
            id.to_string(),
            ms(until),
            ms(now)
        ])?;
    }
    Ok((e, released))
}

const DELETE_ENDPOINT: &str = "DELETE FROM outbox_endpoints WHERE id = ?1 AND tenant = ?2";

/// Remove an endpoint of a tenant; its held deliveries become due so the next claim ends
/// them (`endpoint-removed`). Returns how many were released.
pub(crate) fn delete_endpoint(
    conn: &Connection,
    tenant: &TenantId,
    id: EndpointId,
    now: Timestamp,
) -> Result<u64> {
    let n = conn
        .prepare_cached(DELETE_ENDPOINT)?
        .execute(params![id.to_string(), tenant.as_str()])?;
    if n == 0 {
        return Err(Error::not_found("endpoint").into());
    }
    release_held(conn, tenant, id, now)
}

const UPSERT_CONSUMER: &str = "INSERT INTO outbox_consumers (name, filter, created_at) \
     VALUES (?1, ?2, ?3) \
     ON CONFLICT (name) DO UPDATE SET filter = excluded.filter, created_at = excluded.created_at";

/// Register or replace a consumer by name.
pub(crate) fn put_consumer(conn: &Connection, c: &Consumer) -> Result<()> {
    conn.prepare_cached(UPSERT_CONSUMER)?.execute(params![
        c.name.as_str(),
        c.filter.to_string(),
        ms(c.created_at)
    ])?;
    Ok(())
}

/// Every consumer, by name.
pub(crate) fn list_consumers(conn: &Connection) -> Result<Vec<Consumer>> {
    let mut stmt = conn.prepare_cached(SELECT_CONSUMERS)?;
    rows::collect(&mut stmt, rusqlite::params![], rows::consumer)
}

const SET_CONSUMER_STATUS: &str = "UPDATE outbox_consumers SET status = ?2 WHERE name = ?1 \
     RETURNING name, filter, created_at, status";

/// A paused consumer's pending deliveries (of every tenant) are held, due never; those in
/// flight finish as they would.
const HOLD_FOR_CONSUMER: &str = "UPDATE outbox_deliveries \
     SET status = 'held', next_attempt_at = ?2, updated_at = ?3 \
     WHERE grp IN (SELECT id FROM outbox_groups WHERE kind = 'handler' AND target = ?1) \
       AND status = 'pending' AND status NOT IN ('succeeded', 'dead')";

/// A resumed consumer's held deliveries are due at the later of now and their message's
/// `available_at`.
const RELEASE_FOR_CONSUMER: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', updated_at = ?2, next_attempt_at = MAX(?2, coalesce(( \
         SELECT m.available_at FROM outbox_messages AS m \
          WHERE m.id = outbox_deliveries.message_id), ?2)) \
     WHERE grp IN (SELECT id FROM outbox_groups WHERE kind = 'handler' AND target = ?1) \
       AND status = 'held' AND status NOT IN ('succeeded', 'dead')";

/// Pause or resume a consumer, holding or releasing its deliveries. Returns it as stored
/// and how many deliveries were released.
pub(crate) fn set_consumer_status(
    conn: &Connection,
    name: &ConsumerName,
    status: ConsumerStatus,
    now: Timestamp,
) -> Result<(Consumer, u64)> {
    let consumer = {
        let mut stmt = conn.prepare_cached(SET_CONSUMER_STATUS)?;
        let mut rows = stmt.query(params![name.as_str(), status.as_str()])?;
        match rows.next()? {
            Some(row) => rows::consumer(row)?,
            None => return Err(Error::not_found("consumer").into()),
        }
    };
    let released = match status.hold_until() {
        Some(until) => {
            conn.prepare_cached(HOLD_FOR_CONSUMER)?.execute(params![
                name.as_str(),
                ms(until),
                ms(now)
            ])?;
            0
        }
        None => conn
            .prepare_cached(RELEASE_FOR_CONSUMER)?
            .execute(params![name.as_str(), ms(now)])? as u64,
    };
    Ok((consumer, released))
}

const DELETE_CONSUMER: &str = "DELETE FROM outbox_consumers WHERE name = ?1";

/// Remove a consumer.
pub(crate) fn delete_consumer(conn: &Connection, name: &ConsumerName) -> Result<()> {
    let n = conn
        .prepare_cached(DELETE_CONSUMER)?
        .execute([name.as_str()])?;
    if n == 0 {
        return Err(Error::not_found("consumer").into());
    }
    Ok(())
}

#[async_trait]
impl EndpointStore for SqliteStore {
    async fn create_endpoint(&self, endpoint: &Endpoint) -> outboxkit_core::Result<()> {
        let endpoint = endpoint.clone();
        let change = self.routes().change();
        self.write(move |tx, _, _| {
            let _routes = &change;
            self::create_endpoint(tx, &endpoint)
        })
        .await
    }

    async fn get_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
    ) -> outboxkit_core::Result<Endpoint> {
        let tenant = tenant.clone();
        self.read(move |tx, _| self::get_endpoint(tx, &tenant, id))
            .await
    }

    async fn list_endpoints(&self, tenant: &TenantId) -> outboxkit_core::Result<Vec<Endpoint>> {
        let tenant = tenant.clone();
        self.read(move |tx, _| self::list_endpoints(tx, &tenant))
            .await
    }

    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> outboxkit_core::Result<Endpoint> {
        let (tenant, update) = (tenant.clone(), update.clone());
        let change = self.routes().change();
        let (endpoint, released) = self
            .write(move |tx, now, _| {
                let _routes = &change;
                self::update_endpoint(tx, &tenant, id, &update, now)
            })
            .await?;
        self.wake_if(released > 0);
        Ok(endpoint)
    }

    async fn delete_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
    ) -> outboxkit_core::Result<()> {
        let tenant = tenant.clone();
        let change = self.routes().change();
        let n = self
            .write(move |tx, now, _| {
                let _routes = &change;
                self::delete_endpoint(tx, &tenant, id, now)
            })
            .await?;
        self.wake_if(n > 0);
        Ok(())
    }

    async fn put_consumer(&self, consumer: &Consumer) -> outboxkit_core::Result<()> {
        let consumer = consumer.clone();
        let change = self.routes().change();
        self.write(move |tx, _, _| {
            let _routes = &change;
            self::put_consumer(tx, &consumer)
        })
        .await
    }

    async fn list_consumers(&self) -> outboxkit_core::Result<Vec<Consumer>> {
        self.read(|tx, _| self::list_consumers(tx)).await
    }

    async fn delete_consumer(&self, name: &ConsumerName) -> outboxkit_core::Result<()> {
        let name = name.clone();
        let change = self.routes().change();
        self.write(move |tx, _, _| {
            let _routes = &change;
            self::delete_consumer(tx, &name)
        })
        .await
    }

    async fn set_consumer_status(
        &self,
        name: &ConsumerName,
        status: ConsumerStatus,
    ) -> outboxkit_core::Result<Consumer> {
        let name = name.clone();
        let change = self.routes().change();
        let (consumer, released) = self
            .write(move |tx, now, _| {
                let _routes = &change;
                self::set_consumer_status(tx, &name, status, now)
            })
            .await?;
        self.wake_if(released > 0);
        Ok(consumer)
    }
}
