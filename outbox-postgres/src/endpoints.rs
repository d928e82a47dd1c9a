//! `EndpointStore`: webhook endpoints (tenant-scoped) and consumers (global).
//!
//! # Cancel safety
//!
//! Each call is one statement, or one transaction (update and delete, with the holds and
//! releases of the endpoint's deliveries): dropping its future leaves it applied or not.

use async_trait::async_trait;
use outboxkit_core::endpoint::check_description;
use outboxkit_core::{
    Consumer, ConsumerName, ConsumerStatus, Endpoint, EndpointId, EndpointStore, EndpointUpdate,
    Error, Result, TenantId, Timestamp,
};
use sqlx::postgres::PgConnection;

use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::sql::Params;
use crate::store::PostgresStore;

/// An endpoint's id and tenant, the key of most endpoint statements.
fn key<'q>(tenant: &'q TenantId, id: EndpointId) -> Params<'q> {
    Params::new()
        .set("id", id.as_uuid())
        .set("tenant", tenant.as_str())
}

impl PostgresStore {
    /// The parameters of `release_held` (`sql/deliveries.sql`) for one endpoint.
    fn release_params<'q>(
        &'q self,
        tenant: &'q TenantId,
        id: EndpointId,
        now: Timestamp,
    ) -> Params<'q> {
        Params::new()
            .set("tenant", tenant.as_str())
            .set("endpoint", id.to_string())
            .set("now", ms(now))
            .set("channel", self.inner.channel.as_str())
    }

    async fn write_endpoint(
        &self,
        conn: &mut PgConnection,
        e: &Endpoint,
        insert: bool,
    ) -> Result<u64> {
        let sql = &self.inner.sql.endpoints;
        let params = key(&e.tenant, e.id)
            .set("url", e.url.as_str())
            .set("description", e.description.as_str())
            .set("filter", rows::filter_to(&e.filter))
            .set("status", e.status.as_str())
            .set("disabled_reason", e.status.reason().map(|r| r.as_str()))
            .set("secret", e.secret.0.as_slice())
            .set(
                "previous_secret",
                e.previous_secret.as_ref().map(|s| s.0.as_slice()),
            )
            .set("body_format", e.body_format.as_str())
            .set("rate_limit", e.rate_limit.map(rows::int4))
            .set("fifo", e.fifo)
            .set("updated_at", ms(e.updated_at))
            .set(
                "headers",
                outboxkit_core::endpoint_headers::encode_headers(&e.headers),
            );
        let q = if insert {
            sql.insert_endpoint
                .bind(params.set("created_at", ms(e.created_at)))?
        } else {
            sql.update_endpoint.bind(params)?
        };
        Ok(q.execute(conn).await.db()?.rows_affected())
    }
}

#[async_trait]
impl EndpointStore for PostgresStore {
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()> {
        check_description(&endpoint.description)?;
        outboxkit_core::endpoint::check_rate_limit(endpoint.rate_limit)?;
        outboxkit_core::endpoint::check_headers(&endpoint.headers)?;
        let mut conn = self.inner.pool.acquire().await.db()?;
        // A second endpoint with the same id is a unique violation: `Conflict`.
        self.write_endpoint(&mut conn, endpoint, true).await?;
        Ok(())
    }

    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
        let row = (self.inner.sql.endpoints.get_endpoint)
            .bind(key(tenant, id))?
            .fetch_optional(&self.inner.pool)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("endpoint"))?;
        rows::endpoint(&row)
    }

    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
        (self.inner.sql.endpoints.list_endpoints)
            .bind(Params::new().set("tenant", tenant.as_str()))?
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
        let row = (self.inner.sql.endpoints.lock_endpoint)
            .bind(key(tenant, id))?
            .fetch_optional(&mut *tx)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("endpoint"))?;
        let mut endpoint = rows::endpoint(&row)?;
        update.apply(&mut endpoint, now);
        outboxkit_core::endpoint::check_headers(&endpoint.headers)?;
        self.write_endpoint(&mut tx, &endpoint, false).await?;
        let mut released = 0;
        if update.releases_held(&endpoint.status) {
            let row = (self.inner.sql.deliveries.release_held)
                .bind(self.release_params(tenant, id, now))?
                .fetch_one(&mut *tx)
                .await
                .db()?;
            released = get::<i64>(&row, "n")?;
        }
        if let Some(until) = update.holds_until(now) {
            let params = Params::new()
                .set("tenant", tenant.as_str())
                .set("endpoint", id.to_string())
                .set("until", ms(until))
                .set("now", ms(now));
            (self.inner.sql.deliveries.hold_for_endpoint)
                .bind(params)?
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
        let done = (self.inner.sql.endpoints.delete_endpoint)
            .bind(key(tenant, id))?
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("endpoint"));
        }
        // Its held deliveries become due, so the next claim ends them (`endpoint-removed`).
        let row = (self.inner.sql.deliveries.release_held)
            .bind(self.release_params(tenant, id, now))?
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
        let params = Params::new()
            .set("name", consumer.name.as_str())
            .set("filter", rows::filter_to(&consumer.filter))
            .set("created_at", ms(consumer.created_at));
        (self.inner.sql.endpoints.put_consumer)
            .bind(params)?
            .execute(&self.inner.pool)
            .await
            .db()?;
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        (self.inner.sql.endpoints.list_consumers)
            .bind(Params::new())?
            .fetch_all(&self.inner.pool)
            .await
            .db()?
            .iter()
            .map(rows::consumer)
            .collect()
    }

    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        let done = (self.inner.sql.endpoints.delete_consumer)
            .bind(Params::new().set("name", name.as_str()))?
            .execute(&self.inner.pool)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("consumer"));
        }
        Ok(())
    }
    async fn set_consumer_status(
        &self,
        name: &ConsumerName,
        status: ConsumerStatus,
    ) -> Result<Consumer> {
        let now = self.inner.clock.now();
        let sql = &self.inner.sql.endpoints;
        let mut tx = self.inner.pool.begin().await.db()?;
        let row = (sql.set_consumer_status)
            .bind(
                Params::new()
                    .set("name", name.as_str())
                    .set("status", status.as_str()),
            )?
            .fetch_optional(&mut *tx)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("consumer"))?;
        let consumer = rows::consumer(&row)?;
        let mut released = 0;
        match status.hold_until() {
            Some(until) => {
                let params = Params::new()
                    .set("name", name.as_str())
                    .set("until", ms(until))
                    .set("now", ms(now));
                (sql.hold_for_consumer)
                    .bind(params)?
                    .execute(&mut *tx)
                    .await
                    .db()?;
            }
            None => {
                let params = Params::new()
                    .set("name", name.as_str())
                    .set("now", ms(now))
                    .set("channel", self.inner.channel.as_str());
                let row = (sql.release_for_consumer)
                    .bind(params)?
                    .fetch_one(&mut *tx)
                    .await
                    .db()?;
                released = get::<i64>(&row, "n")?;
            }
        }
        tx.commit().await.db()?;
        if released > 0 {
            self.inner.wake.wakeups().wake();
        }
        Ok(consumer)
    }
}
