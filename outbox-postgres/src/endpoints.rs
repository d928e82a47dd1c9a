//! `EndpointStore`: webhook endpoints (tenant-scoped) and consumers (global).

use async_trait::async_trait;
use outboxkit_core::endpoint::check_description;
use outboxkit_core::{
    Consumer, ConsumerName, Endpoint, EndpointId, EndpointStore, EndpointUpdate, Error, Result,
    TenantId,
};
use sqlx::postgres::PgConnection;

use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::store::PostgresStore;

impl PostgresStore {
    async fn write_endpoint(
        &self,
        conn: &mut PgConnection,
        e: &Endpoint,
        insert: bool,
    ) -> Result<u64> {
        let sql = if insert {
            &self.inner.sql.insert_endpoint
        } else {
            &self.inner.sql.update_endpoint
        };
        let q = sqlx::query(sql)
            .bind(e.id.as_uuid())
            .bind(e.tenant.as_str());
        let q = q
            .bind(e.url.as_str())
            .bind(&e.description)
            .bind(rows::filter_to(&e.filter))
            .bind(e.status.as_str())
            .bind(e.status.reason().map(|r| r.as_str()))
            .bind(&e.secret.0)
            .bind(e.previous_secret.as_ref().map(|s| &s.0))
            .bind(e.body_format.as_str())
            .bind(e.rate_limit.map(rows::int4));
        let q = if insert {
            q.bind(ms(e.created_at)).bind(ms(e.updated_at))
        } else {
            q.bind(ms(e.updated_at))
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
        let row = sqlx::query(&self.inner.sql.get_endpoint)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("endpoint"))?;
        rows::endpoint(&row)
    }

    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
        sqlx::query(&self.inner.sql.list_endpoints)
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
        let row = sqlx::query(&self.inner.sql.lock_endpoint)
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
        if update.releases_held() {
            let row = sqlx::query(&self.inner.sql.release_held)
                .bind(tenant.as_str())
                .bind(id.to_string())
                .bind(ms(now))
                .bind(&self.inner.channel)
                .fetch_one(&mut *tx)
                .await
                .db()?;
            released = get::<i64>(&row, "n")?;
        }
        if let Some(until) = update.holds_until(now) {
            sqlx::query(&self.inner.sql.hold_for_endpoint)
                .bind(tenant.as_str())
                .bind(id.to_string())
                .bind(ms(until))
                .bind(ms(now))
                .execute(&mut *tx)
                .await
                .db()?;
        }
        tx.commit().await.db()?;
        if released > 0 {
            self.inner.wakeups.wake();
        }
        Ok(endpoint)
    }

    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
        let now = self.inner.clock.now();
        let mut tx = self.inner.pool.begin().await.db()?;
        let done = sqlx::query(&self.inner.sql.delete_endpoint)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            return Err(Error::not_found("endpoint"));
        }
        // Its held deliveries become due, so the next claim ends them (`endpoint-removed`).
        let row = sqlx::query(&self.inner.sql.release_held)
            .bind(tenant.as_str())
            .bind(id.to_string())
            .bind(ms(now))
            .bind(&self.inner.channel)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let released = get::<i64>(&row, "n")?;
        tx.commit().await.db()?;
        if released > 0 {
            self.inner.wakeups.wake();
        }
        Ok(())
    }

    async fn put_consumer(&self, consumer: &Consumer) -> Result<()> {
        sqlx::query(&self.inner.sql.put_consumer)
            .bind(consumer.name.as_str())
            .bind(rows::filter_to(&consumer.filter))
            .bind(ms(consumer.created_at))
            .execute(&self.inner.pool)
            .await
            .db()?;
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        sqlx::query(&self.inner.sql.list_consumers)
            .fetch_all(&self.inner.pool)
            .await
            .db()?
            .iter()
            .map(rows::consumer)
            .collect()
    }

    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        let done = sqlx::query(&self.inner.sql.delete_consumer)
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
