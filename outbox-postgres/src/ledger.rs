//! `Ledger`: listings, attempts, and retention with tenant rotation.

use async_trait::async_trait;
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::{
    Attempt, Cursor, Delivery, DeliveryFilter, DeliveryId, Error, Ledger, Message, MessageId, Page,
    PageRequest, PurgeReport, Result, RetentionCutoffs, TenantId, TenantStats, Timestamp,
};

use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::store::PostgresStore;

#[async_trait]
impl Ledger for PostgresStore {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        page.validate()?;
        filter.validate()?;
        let limit = page.limit as usize;
        let found = sqlx::query(&self.inner.sql.list_deliveries)
            .bind(tenant.as_str())
            .bind(filter.status.map(|s| s.as_str()))
            .bind(filter.endpoint.map(|e| e.to_string()))
            .bind(filter.consumer.as_ref().map(|c| c.as_str()))
            .bind(filter.kind.map(|k| k.as_str()))
            .bind(filter.topic.as_ref().map(|t| t.as_str()))
            .bind(filter.since.map(ms))
            .bind(filter.until.map(ms))
            .bind(page.cursor.map(|c| ms(c.created_at)))
            .bind(page.cursor.map(|c| c.id.as_uuid()))
            .bind(limit as i64 + 1)
            .bind(filter.ordering_key.as_ref().map(|k| k.as_str()))
            .bind(filter.text.as_ref().map(|t| t.to_ascii_lowercase()))
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
        let mut items = found
            .iter()
            .map(rows::delivery)
            .collect::<Result<Vec<_>>>()?;
        let more = items.len() > limit;
        items.truncate(limit);
        let next = if more {
            items.last().map(Cursor::after)
        } else {
            None
        };
        Ok(Page { items, next })
    }

    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        let row = sqlx::query(&self.inner.sql.get_delivery)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("delivery"))?;
        rows::delivery(&row)
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        let row = sqlx::query(&self.inner.sql.get_message)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("message"))?;
        rows::message(&row)
    }

    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
        let found = sqlx::query(&self.inner.sql.attempts)
            .bind(delivery.as_uuid())
            .bind(tenant.as_str())
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
        if found.is_empty() {
            return Err(Error::not_found("delivery"));
        }
        let mut out = Vec::with_capacity(found.len());
        for row in &found {
            // The delivery exists but has no attempts: one row of NULLs.
            if get::<Option<i32>>(row, "number")?.is_some() {
                out.push(rows::attempt(row, delivery)?);
            }
        }
        Ok(out)
    }

    async fn purge_expired(&self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        let sql = &self.inner.sql;
        let (names, times): (Vec<&str>, Vec<i64>) = cutoffs
            .tenants
            .iter()
            .map(|(t, c)| (t.as_str(), ms(*c)))
            .unzip();
        let mut tx = self.inner.pool.begin().await.db()?;
        // Serialises purgers: each call serves the tenant after the one served last.
        let cursor: String = sqlx::query_scalar(&sql.lock_purge_cursor)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let tenant: Option<String> = sqlx::query_scalar(&sql.purge_pick_tenant)
            .bind(ms(cutoffs.default))
            .bind(&cursor)
            .bind(&names)
            .bind(&times)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let Some(tenant) = tenant else {
            tx.commit().await.db()?;
            return Ok(PurgeReport::default());
        };
        let tenant = TenantId::new(tenant)?;
        let report = self
            .purge_one(&mut tx, &tenant, cutoffs.before(&tenant), limit)
            .await?;
        sqlx::query(&sql.set_purge_cursor)
            .bind(tenant.as_str())
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        Ok(report)
    }

    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        let mut tx = self.inner.pool.begin().await.db()?;
        let report = self.purge_one(&mut tx, tenant, before, limit).await?;
        tx.commit().await.db()?;
        Ok(report)
    }

    async fn tenants(&self) -> Result<Vec<TenantStats>> {
        crate::tenancy::tenants(self).await
    }
}

impl PostgresStore {
    /// Remove one tenant's finished deliveries (with attempts) and left-over messages.
    async fn purge_one(
        &self,
        tx: &mut sqlx::PgConnection,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        let sql = &self.inner.sql;
        let deliveries: i64 = sqlx::query_scalar(&sql.purge_deliveries)
            .bind(tenant.as_str())
            .bind(ms(before))
            .bind(i64::from(limit))
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let messages: i64 = sqlx::query_scalar(&sql.purge_messages)
            .bind(tenant.as_str())
            .bind(ms(before))
            .bind(i64::from(limit))
            .fetch_one(&mut *tx)
            .await
            .db()?;
        Ok(PurgeReport {
            deliveries: u64::try_from(deliveries).unwrap_or(0),
            messages: u64::try_from(messages).unwrap_or(0),
            tenant: Some(tenant.clone()),
        })
    }
}
