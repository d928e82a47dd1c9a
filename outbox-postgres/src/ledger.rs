//! `Ledger`: listings, a delivery and its message, attempts, and retention with tenant
//! rotation.
//!
//! # Cancel safety
//!
//! Reads have no side effect. A purge runs in one transaction: dropping its future rolls it
//! back (nothing removed) unless the commit was already sent.

use outboxkit_core::store::check_purge_limit;
use outboxkit_core::{
    Attempt, Cursor, Delivery, DeliveryFilter, DeliveryId, Error, Message, MessageId, Page,
    PageRequest, PurgeReport, Result, RetentionCutoffs, TenantId, Timestamp,
};

use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::sql::Params;
use crate::store::PostgresStore;
use async_trait::async_trait;
use outboxkit_core::Ledger;
use outboxkit_core::TenantStats;
use sqlx::AssertSqlSafe;

impl PostgresStore {
    /// `Ledger::list_deliveries`: `sql/ledger.sql` `list_deliveries`.
    pub(crate) async fn list_page(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        page.validate()?;
        filter.validate()?;
        let limit = page.limit as usize;
        let params = Params::new()
            .set("tenant", tenant.as_str())
            .set("status", filter.status.map(|s| s.as_str()))
            .set("endpoint", filter.endpoint.map(|e| e.to_string()))
            .set("consumer", filter.consumer.as_ref().map(|c| c.as_str()))
            .set("kind", filter.kind.map(|k| k.as_str()))
            .set("topic", filter.topic.as_ref().map(|t| t.as_str()))
            .set("since", filter.since.map(ms))
            .set("until", filter.until.map(ms))
            .set("cursor_at", page.cursor.map(|c| ms(c.created_at)))
            .set("cursor_id", page.cursor.map(|c| c.id.as_uuid()))
            .set("limit", limit as i64 + 1)
            .set(
                "ordering_key",
                filter.ordering_key.as_ref().map(|k| k.as_str()),
            )
            .set("text", filter.text.as_ref().map(|t| t.to_ascii_lowercase()));
        let found = (self.inner.sql.ledger.list_deliveries)
            .bind(params)?
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

    /// `Ledger::get_delivery`.
    pub(crate) async fn delivery_of(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        let key = Params::new()
            .set("id", id.as_uuid())
            .set("tenant", tenant.as_str());
        let row = (self.inner.sql.ledger.get_delivery)
            .bind(key)?
            .fetch_optional(&self.inner.pool)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("delivery"))?;
        rows::delivery(&row)
    }

    /// `Ledger::get_message`.
    pub(crate) async fn message_of(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        let key = Params::new()
            .set("id", id.as_uuid())
            .set("tenant", tenant.as_str());
        let row = (self.inner.sql.ledger.get_message)
            .bind(key)?
            .fetch_optional(&self.inner.pool)
            .await
            .db()?
            .ok_or_else(|| Error::not_found("message"))?;
        rows::message(&row)
    }
}

impl PostgresStore {
    /// `Ledger::attempts`: `attempts` of `sql/ledger.sql`.
    pub(crate) async fn attempts_of(
        &self,
        tenant: &TenantId,
        delivery: DeliveryId,
    ) -> Result<Vec<Attempt>> {
        let params = Params::new()
            .set("delivery", delivery.as_uuid())
            .set("tenant", tenant.as_str());
        let found = (self.inner.sql.ledger.attempts.bind(params)?)
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
}

impl PostgresStore {
    /// `Ledger::purge_expired`: the next tenant after the one served last, then its purge.
    pub(crate) async fn purge_next(
        &self,
        cutoffs: &RetentionCutoffs,
        limit: u32,
    ) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        let sql = &self.inner.sql.ledger;
        let (names, times): (Vec<&str>, Vec<i64>) = cutoffs
            .tenants
            .iter()
            .map(|(t, c)| (t.as_str(), ms(*c)))
            .unzip();
        let mut tx = self.inner.pool.begin().await.db()?;
        purge_plans(&mut tx).await?;
        // Serialises purgers: each call serves the tenant after the one served last.
        let row = (sql.lock_purge_cursor.bind(Params::new())?)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let cursor: String = get(&row, "tenant")?;
        let params = Params::new()
            .set("default_cutoff", ms(cutoffs.default))
            .set("last", cursor.as_str())
            .set("tenants", &names)
            .set("cutoffs", &times);
        let row = (sql.purge_pick_tenant.bind(params)?)
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let tenant: Option<String> = get(&row, "tenant")?;
        let Some(tenant) = tenant else {
            tx.commit().await.db()?;
            return Ok(PurgeReport::default());
        };
        let tenant = TenantId::new(tenant)?;
        let report = self
            .purge_one(&mut tx, &tenant, cutoffs.before(&tenant), limit)
            .await?;
        (sql.set_purge_cursor
            .bind(Params::new().set("tenant", tenant.as_str()))?)
        .execute(&mut *tx)
        .await
        .db()?;
        tx.commit().await.db()?;
        drop(names);
        let oldest = times.iter().copied().fold(ms(cutoffs.default), i64::min);
        self.drop_empty_partitions(oldest).await?;
        Ok(report)
    }

    /// Drop the history's partitions that end before `cutoff` (ms) and that the purge has
    /// emptied: a day of finished deliveries costs the catalog nothing once it is gone. A
    /// partition is checked and dropped under a lock of the history and itself, waited for
    /// at most a second (a busy history is left for the next purge); the newest partition
    /// always stays.
    async fn drop_empty_partitions(&self, cutoff: i64) -> Result<()> {
        let params = Params::new()
            .set("history", self.inner.tables.history.as_str())
            .set("cutoff", cutoff);
        let parts: Vec<String> = (self.inner.sql.ledger.old_partitions.bind_scalar(params)?)
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
        for part in parts {
            let lock = format!(
                "LOCK TABLE {}, {part} IN ACCESS EXCLUSIVE MODE",
                self.inner.tables.history
            );
            let probe = format!("SELECT NOT EXISTS (SELECT 1 FROM {part})");
            let drop = format!("DROP TABLE {part}");
            let mut tx = self.inner.pool.begin().await.db()?;
            sqlx::query("SET LOCAL lock_timeout = '1s'")
                .execute(&mut *tx)
                .await
                .db()?;
            if sqlx::query(AssertSqlSafe(lock))
                .execute(&mut *tx)
                .await
                .is_err()
            {
                continue; // busy: the next purge tries again
            }
            let empty: bool = sqlx::query_scalar(AssertSqlSafe(probe))
                .fetch_one(&mut *tx)
                .await
                .db()?;
            if empty {
                sqlx::query(AssertSqlSafe(drop))
                    .execute(&mut *tx)
                    .await
                    .db()?;
            }
            tx.commit().await.db()?;
        }
        Ok(())
    }

    /// `Ledger::purge_tenant`.
    pub(crate) async fn purge_of(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        let mut tx = self.inner.pool.begin().await.db()?;
        purge_plans(&mut tx).await?;
        let report = self.purge_one(&mut tx, tenant, before, limit).await?;
        tx.commit().await.db()?;
        Ok(report)
    }

    /// Remove one tenant's finished deliveries (with attempts) and left-over messages, in
    /// work bounded by `limit`, not by the size of the history:
    /// - the deliveries a partition at a time, oldest first, each found and deleted by its
    ///   row address (`purge_partition`);
    /// - then the messages of those deliveries that have no delivery left
    ///   (`purge_messages_of`);
    /// - and, once the tenant has no finished delivery left to purge (fewer than `limit`
    ///   were), its other messages without deliveries, up to what remains of `limit`
    ///   (`purge_messages`, which reads them against the whole queue and history).
    ///
    /// The first two run without sequential scans (`enable_seqscan = off`, this transaction
    /// only; see [`purge_plans`] for the rest): a partition that was empty when planned may
    /// fill with today's completions while a probe loops over it, and a scan of the messages
    /// for ten thousand ids costs more than their probes. The sweep, which reads the whole
    /// queue and history, has them back.
    async fn purge_one(
        &self,
        tx: &mut sqlx::PgConnection,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        let sql = &self.inner.sql.ledger;
        sqlx::query("SELECT set_config('enable_seqscan', 'off', true)")
            .execute(&mut *tx)
            .await
            .db()?;
        let params = Params::new()
            .set("history", self.inner.tables.history.as_str())
            .set("before", ms(before));
        let parts: Vec<String> = (sql.history_parts.bind_scalar(params)?)
            .fetch_all(&mut *tx)
            .await
            .db()?;
        let mut ids: Vec<uuid::Uuid> = Vec::new();
        let mut created: Vec<i64> = Vec::new();
        let mut deliveries = 0u64;
        for part in parts {
            let left = u64::from(limit).saturating_sub(deliveries);
            if left == 0 {
                break;
            }
            let statement = sql.purge_partition(&self.inner.tables, &part)?;
            let params = Params::new()
                .set("tenant", tenant.as_str())
                .set("before", ms(before))
                .set("limit", i64::try_from(left).unwrap_or(i64::MAX));
            let found = (statement.bind(params)?).fetch_all(&mut *tx).await.db()?;
            deliveries += found.len() as u64;
            for row in &found {
                ids.push(get(row, "message_id")?);
                created.push(get(row, "created_at")?);
            }
        }
        ids.sort_unstable();
        ids.dedup();
        created.sort_unstable();
        created.dedup();
        let mut messages = 0u64;
        if !ids.is_empty() {
            let params = Params::new()
                .set("ids", &ids)
                .set("created", &created)
                .set("tenant", tenant.as_str())
                .set("before", ms(before));
            let row = (sql.purge_messages_of.bind(params)?)
                .fetch_one(&mut *tx)
                .await
                .db()?;
            messages += count(&row)?;
        }
        if deliveries < u64::from(limit) {
            sqlx::query("SELECT set_config('enable_seqscan', 'on', true)")
                .execute(&mut *tx)
                .await
                .db()?;
            let left = u64::from(limit).saturating_sub(messages).max(1);
            let params = Params::new()
                .set("tenant", tenant.as_str())
                .set("before", ms(before))
                .set("limit", i64::try_from(left).unwrap_or(i64::MAX));
            let row = (sql.purge_messages.bind(params)?)
                .fetch_one(&mut *tx)
                .await
                .db()?;
            messages += count(&row)?;
        }
        Ok(PurgeReport {
            deliveries,
            messages,
            tenant: Some(tenant.clone()),
        })
    }
}

/// How a purge transaction plans: each statement for the sizes at hand
/// (`force_custom_plan`; a partition that was empty when a generic plan was made may hold
/// today's completions by now), and without JIT (a pick's or a purge's estimated cost, with
/// its rarely run branches or its disabled scans, compiled every statement: ≈ 0.2–0.4 s
/// each, more than the work). `SET LOCAL`: the pool's connections are not changed.
async fn purge_plans(tx: &mut sqlx::PgConnection) -> Result<()> {
    sqlx::query(
        "SELECT set_config('plan_cache_mode', 'force_custom_plan', true), \
                set_config('jit', 'off', true)",
    )
    .execute(&mut *tx)
    .await
    .db()?;
    Ok(())
}

/// The `n` of a counting statement.
fn count(row: &sqlx::postgres::PgRow) -> Result<u64> {
    let n: i64 = get(row, "n")?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// `Ledger` (the tenant listing in `tenancy.rs`).
#[async_trait]
impl Ledger for PostgresStore {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        self.list_page(tenant, filter, page).await
    }

    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        self.delivery_of(tenant, id).await
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        self.message_of(tenant, id).await
    }

    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
        self.attempts_of(tenant, delivery).await
    }

    async fn purge_expired(&self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport> {
        self.purge_next(cutoffs, limit).await
    }

    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        self.purge_of(tenant, before, limit).await
    }

    async fn tenants(&self) -> Result<Vec<TenantStats>> {
        crate::tenancy::tenants(self).await
    }
}
