//! `EndpointStore`: webhook endpoints (tenant-scoped) and consumers (global).
//!
//! # Cancel safety
//!
//! Each call is one statement, or one transaction (update and delete, with the holds and
//! releases of the endpoint's deliveries): dropping its future leaves it applied or not.

use async_trait::async_trait;
use outboxkit_core::endpoint::check_description;
use outboxkit_core::{
    Consumer, ConsumerName, Endpoint, EndpointId, EndpointStore, EndpointUpdate, Error, Result,
    TenantId,
};
use sqlx::postgres::PgConnection;

use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::schema::Tables;
use crate::store::PostgresStore;

const ENDPOINT_COLS: &str = "id, tenant, url, description, filter, status, disabled_reason, \
     secret, previous_secret, body_format, rate_limit, created_at, updated_at";

/// [`ENDPOINT_COLS`] and the endpoint's last delivery (read, never inserted).
const ENDPOINT_READ_COLS: &str = "id, tenant, url, description, filter, status, disabled_reason, \
     secret, previous_secret, body_format, rate_limit, created_at, updated_at, last_outcome, \
     last_status_code, last_at";

/// The endpoint and consumer statements of one store. Each names its parameters; the
/// endpoint's columns are bound by [`PostgresStore::write_endpoint`].
#[derive(Debug)]
pub(crate) struct Sql {
    insert_endpoint: String,
    update_endpoint: String,
    get_endpoint: String,
    lock_endpoint: String,
    list_endpoints: String,
    delete_endpoint: String,
    put_consumer: String,
    list_consumers: String,
    delete_consumer: String,
}

impl Sql {
    pub fn new(t: &Tables) -> Self {
        let (e, c) = (&t.endpoints, &t.consumers);
        // $1 id, $2 tenant.
        let get_endpoint = format!(
            "SELECT {ENDPOINT_READ_COLS} FROM {e} WHERE id = $1::uuid AND tenant = $2::text"
        );
        Sql {
            // $1…$13: ENDPOINT_COLS in order.
            insert_endpoint: format!(
                "INSERT INTO {e} ({ENDPOINT_COLS}) \
                 VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text[], $6::text, \
                         $7::text, $8::bytea, $9::bytea, $10::text, $11::int4, $12::int8, \
                         $13::int8)"
            ),
            // $1…$11: ENDPOINT_COLS up to rate_limit, $12 updated_at.
            update_endpoint: format!(
                "UPDATE {e} SET url = $3::text, description = $4::text, filter = $5::text[], \
                        status = $6::text, disabled_reason = $7::text, secret = $8::bytea, \
                        previous_secret = $9::bytea, body_format = $10::text, \
                        rate_limit = $11::int4, updated_at = $12::int8 \
                  WHERE id = $1::uuid AND tenant = $2::text"
            ),
            lock_endpoint: format!("{get_endpoint} FOR UPDATE"),
            get_endpoint,
            // $1 tenant.
            list_endpoints: format!(
                "SELECT {ENDPOINT_READ_COLS} FROM {e} WHERE tenant = $1::text \
                  ORDER BY created_at, id"
            ),
            // $1 id, $2 tenant.
            delete_endpoint: format!("DELETE FROM {e} WHERE id = $1::uuid AND tenant = $2::text"),
            // $1 name, $2 filter, $3 created at.
            put_consumer: format!(
                "INSERT INTO {c} (name, filter, created_at) \
                 VALUES ($1::text, $2::text[], $3::int8) \
                 ON CONFLICT (name) DO UPDATE SET filter = EXCLUDED.filter, \
                                                  created_at = EXCLUDED.created_at"
            ),
            list_consumers: format!("SELECT name, filter, created_at FROM {c} ORDER BY name"),
            // $1 name.
            delete_consumer: format!("DELETE FROM {c} WHERE name = $1::text"),
        }
    }
}

impl PostgresStore {
    async fn write_endpoint(
        &self,
        conn: &mut PgConnection,
        e: &Endpoint,
        insert: bool,
    ) -> Result<u64> {
        let sql = if insert {
            &self.inner.sql.endpoints.insert_endpoint
        } else {
            &self.inner.sql.endpoints.update_endpoint
        };
        let q = sqlx::query(sql)
            .bind(e.id.as_uuid()) // $1
            .bind(e.tenant.as_str()) // $2
            .bind(e.url.as_str()) // $3
            .bind(&e.description) // $4
            .bind(rows::filter_to(&e.filter)) // $5
            .bind(e.status.as_str()) // $6
            .bind(e.status.reason().map(|r| r.as_str())) // $7
            .bind(&e.secret.0) // $8
            .bind(e.previous_secret.as_ref().map(|s| &s.0)) // $9
            .bind(e.body_format.as_str()) // $10
            .bind(e.rate_limit.map(rows::int4)); // $11
        let q = if insert {
            q.bind(ms(e.created_at)).bind(ms(e.updated_at)) // $12, $13
        } else {
            q.bind(ms(e.updated_at)) // $12
        };
        Ok(q.execute(conn).await.db()?.rows_affected())
    }
}

#[async_trait]
impl EndpointStore for PostgresStore {
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()> {
        check_description(&endpoint.description)?;
        outboxkit_core::endpoint::check_rate_limit(endpoint.rate_limit)?;
        let mut conn = self.inner.pool.acquire().await.db()?;
        // A second endpoint with the same id is a unique violation: `Conflict`.
        self.write_endpoint(&mut conn, endpoint, true).await?;
        Ok(())
    }

    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
        let row = sqlx::query(&self.inner.sql.endpoints.get_endpoint)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("endpoint"))?;
        rows::endpoint(&row)
    }

    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
        sqlx::query(&self.inner.sql.endpoints.list_endpoints)
            .bind(tenant.as_str())
            .fetch_all(&self.inner.pool)
            .await
            .db()?
            .iter()
            .map(rows::endpoint)
            .collect()
    }

    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> Result<Endpoint> {
        update.validate()?;
        let now = self.inner.clock.now();
        let mut tx = self.inner.pool.begin().await.db()?;
        let row = sqlx::query(&self.inner.sql.endpoints.lock_endpoint)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .fetch_optional(&mut *tx)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("endpoint"))?;
        let mut endpoint = rows::endpoint(&row)?;
        update.apply(&mut endpoint, now);
        self.write_endpoint(&mut tx, &endpoint, false).await?;
        let mut released = 0;
        if update.releases_held(&endpoint.status) {
            let row = sqlx::query(&self.inner.sql.deliveries.release_held)
                .bind(tenant.as_str()) // $1
                .bind(id.to_string()) // $2
                .bind(ms(now)) // $3
                .bind(&self.inner.channel) // $4
                .fetch_one(&mut *tx)
                .await
                .db()?;
            released = get::<i64>(&row, "n")?;
        }
        if let Some(until) = update.holds_until(now) {
            sqlx::query(&self.inner.sql.deliveries.hold_for_endpoint)
                .bind(tenant.as_str()) // $1
                .bind(id.to_string()) // $2
                .bind(ms(until)) // $3
                .bind(ms(now)) // $4
                .execute(&mut *tx)
                .await
                .db()?;
        }
        tx.commit().await.db()?;
        if released > 0 {
            self.inner.wake.wakeups().wake();
        }
        Ok(endpoint)
    }

    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
        let now = self.inner.clock.now();
        let mut tx = self.inner.pool.begin().await.db()?;
        let done = sqlx::query(&self.inner.sql.endpoints.delete_endpoint)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("endpoint"));
        }
        // Its held deliveries become due, so the next claim ends them (`endpoint-removed`).
        let row = sqlx::query(&self.inner.sql.deliveries.release_held)
            .bind(tenant.as_str()) // $1
            .bind(id.to_string()) // $2
            .bind(ms(now)) // $3
            .bind(&self.inner.channel) // $4
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let released = get::<i64>(&row, "n")?;
        tx.commit().await.db()?;
        if released > 0 {
            self.inner.wake.wakeups().wake();
        }
        Ok(())
    }

    async fn put_consumer(&self, consumer: &Consumer) -> Result<()> {
        sqlx::query(&self.inner.sql.endpoints.put_consumer)
            .bind(consumer.name.as_str())
            .bind(rows::filter_to(&consumer.filter))
            .bind(ms(consumer.created_at))
            .execute(&self.inner.pool)
            .await
            .db()?;
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        sqlx::query(&self.inner.sql.endpoints.list_consumers)
            .fetch_all(&self.inner.pool)
            .await
            .db()?
            .iter()
            .map(rows::consumer)
            .collect()
    }

    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        let done = sqlx::query(&self.inner.sql.endpoints.delete_consumer)
            .bind(name.as_str())
            .execute(&self.inner.pool)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("consumer"));
        }
        Ok(())
    }
}
