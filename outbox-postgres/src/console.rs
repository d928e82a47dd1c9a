//! [`ConsoleStore`] on PostgreSQL: the `audit` and `console_sessions` tables of migration
//! 16 (`sql/console.sql`), and activity counted from the ledger by one `GROUP BY`.

use async_trait::async_trait;
use outboxkit_core::audit::{check_audit_limit, AuditCursor, AuditEntry, AuditPage};
use outboxkit_core::console_store::MAX_SESSIONS_PER_TOKEN;
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::{
    ActivityBucket, ActivityQuery, AuditId, ConsoleSession, ConsoleStore, Error, ErrorKind, Result,
    TenantId, Timestamp, TokenId,
};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::{map_err, DbResult};
use crate::sql::{self, Params, Statement};
use crate::store::PostgresStore;

impl PostgresStore {
    /// A statement of `sql/console.sql` on this store's schema.
    fn console_statement(&self, name: &str) -> Result<Statement> {
        let s = format!("\"{}\"", self.inner.config.schema);
        let audit = format!("{s}.audit");
        let sessions = format!("{s}.console_sessions");
        let t = &self.inner.tables;
        sql::load(
            sql::CONSOLE,
            name,
            &[
                ("audit", &audit),
                ("console_sessions", &sessions),
                ("attempts", &t.attempts),
                ("history", &t.history),
                ("queue", &t.queue),
                ("groups", &t.groups),
            ],
        )
    }
}

fn corrupt(column: &'static str) -> impl FnOnce(Error) -> Error {
    move |e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("a stored value of column `{column}` is not valid"),
        )
        .with_source(e)
    }
}

fn audit_row(row: &PgRow) -> Result<AuditEntry> {
    let id: Uuid = row.try_get("id").map_err(map_err)?;
    let at: i64 = row.try_get("at").map_err(map_err)?;
    let tenant: Option<String> = row.try_get("tenant").map_err(map_err)?;
    Ok(AuditEntry {
        id: AuditId::from_uuid(id).map_err(corrupt("id"))?,
        at: Timestamp::from_unix_millis(at).map_err(corrupt("at"))?,
        tenant: tenant
            .map(TenantId::new)
            .transpose()
            .map_err(corrupt("tenant"))?,
        actor: row.try_get("actor").map_err(map_err)?,
        action: row.try_get("action").map_err(map_err)?,
        target: row.try_get("target").map_err(map_err)?,
        detail: row.try_get("detail").map_err(map_err)?,
        source: row.try_get("source").map_err(map_err)?,
    })
}

fn session_row(row: &PgRow) -> Result<ConsoleSession> {
    let hash: Vec<u8> = row.try_get("id_hash").map_err(map_err)?;
    let token: Uuid = row.try_get("token").map_err(map_err)?;
    let tenant: Option<String> = row.try_get("tenant").map_err(map_err)?;
    let created: i64 = row.try_get("created_at").map_err(map_err)?;
    let expires: i64 = row.try_get("expires_at").map_err(map_err)?;
    Ok(ConsoleSession {
        id_hash: hash.try_into().map_err(|_| {
            Error::new(
                ErrorKind::Unexpected,
                "a stored value of column `id_hash` is not valid",
            )
        })?,
        token: TokenId::from_uuid(token).map_err(corrupt("token"))?,
        scope: match tenant {
            Some(t) => TokenScope::Tenant(TenantId::new(t).map_err(corrupt("tenant"))?),
            None => TokenScope::Admin,
        },
        read_only: row.try_get("read_only").map_err(map_err)?,
        csrf: row.try_get("csrf").map_err(map_err)?,
        created_at: Timestamp::from_unix_millis(created).map_err(corrupt("created_at"))?,
        expires_at: Timestamp::from_unix_millis(expires).map_err(corrupt("expires_at"))?,
    })
}

#[async_trait]
impl ConsoleStore for PostgresStore {
    async fn record_audit(&self, e: &AuditEntry) -> Result<()> {
        e.validate()?;
        let params = Params::new()
            .set("id", e.id.as_uuid())
            .set("at", e.at.as_unix_millis())
            .set("tenant", e.tenant.as_ref().map(TenantId::as_str))
            .set("actor", e.actor.as_str())
            .set("action", e.action.as_str())
            .set("target", e.target.as_str())
            .set("detail", e.detail.as_str())
            .set("source", e.source.as_deref());
        self.console_statement("record_audit")?
            .bind(params)?
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        check_audit_limit(limit)?;
        let params = Params::new()
            .set("tenant", tenant.map(TenantId::as_str))
            .set("at", after.map(|c| c.at.as_unix_millis()))
            .set("id", after.map(|c| c.id.as_uuid()))
            .set("n", i64::from(limit) + 1);
        let rows = self
            .console_statement("list_audit")?
            .bind(params)?
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map_err)?;
        let items = rows.iter().map(audit_row).collect::<Result<Vec<_>>>()?;
        Ok(AuditPage::from_sorted(items, limit))
    }

    async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64> {
        check_purge_limit(limit)?;
        let params = Params::new()
            .set("before", before.as_unix_millis())
            .set("n", i64::from(limit));
        let done = self
            .console_statement("purge_audit")?
            .bind(params)?
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    async fn put_session(&self, s: &ConsoleSession, now: Timestamp) -> Result<()> {
        s.validate()?;
        let expired = self.console_statement("drop_expired_sessions")?;
        let put = self.console_statement("put_session")?;
        let bound = self.console_statement("bound_sessions")?;
        let mut tx = self.inner.pool.begin().await.db()?;
        expired
            .bind(Params::new().set("now", now.as_unix_millis()))?
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let params = Params::new()
            .set("id_hash", s.id_hash.as_slice())
            .set("token", s.token.as_uuid())
            .set("tenant", s.scope.tenant().map(TenantId::as_str))
            .set("read_only", s.read_only)
            .set("csrf", s.csrf.as_str())
            .set("created_at", s.created_at.as_unix_millis())
            .set("expires_at", s.expires_at.as_unix_millis());
        put.bind(params)?.execute(&mut *tx).await.map_err(map_err)?;
        let params = Params::new()
            .set("token", s.token.as_uuid())
            .set("max", MAX_SESSIONS_PER_TOKEN as i64);
        bound
            .bind(params)?
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.db()?;
        Ok(())
    }

    async fn get_session(
        &self,
        id_hash: &[u8; 32],
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>> {
        let params = Params::new()
            .set("id_hash", id_hash.as_slice())
            .set("now", now.as_unix_millis());
        let row = self
            .console_statement("get_session")?
            .bind(params)?
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(session_row).transpose()
    }

    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
        let done = self
            .console_statement("delete_session")?
            .bind(Params::new().set("id_hash", id_hash.as_slice()))?
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
        let done = self
            .console_statement("delete_token_sessions")?
            .bind(Params::new().set("token", token.as_uuid()))?
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    async fn activity(&self, q: &ActivityQuery) -> Result<Vec<ActivityBucket>> {
        q.validate()?;
        let params = Params::new()
            .set("tenant", q.tenant.as_str())
            .set("endpoint", q.endpoint.map(|e| e.to_string()))
            .set("since", q.since.as_unix_millis())
            .set("until", q.until.as_unix_millis())
            .set("bucket", q.bucket_millis());
        let rows = self
            .console_statement("activity")?
            .bind(params)?
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map_err)?;
        let mut out = q.empty_buckets();
        for row in &rows {
            let i: i64 = row.try_get("b").map_err(map_err)?;
            let n = |c: &str| -> Result<u64> {
                let v: i64 = row.try_get(c).map_err(map_err)?;
                Ok(v.max(0) as u64)
            };
            let b = usize::try_from(i)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| {
                    Error::new(ErrorKind::Unexpected, "an activity bucket out of range")
                })?;
            b.succeeded = n("succeeded")?;
            b.failed = n("failed")?;
            b.dead = n("dead")?;
            b.latency_total_ms = n("total")?;
            b.latency_max_ms = n("worst")?;
        }
        Ok(out)
    }
}
