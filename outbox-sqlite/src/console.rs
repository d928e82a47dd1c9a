//! [`ConsoleStore`] on SQLite: the `outbox_audit` and `outbox_console_sessions` tables of
//! migration 14, and activity counted from `outbox_attempts` by one `GROUP BY`.

use async_trait::async_trait;
use outboxkit_core::audit::{check_audit_limit, AuditCursor, AuditEntry, AuditPage};
use outboxkit_core::console_store::MAX_SESSIONS_PER_TOKEN;
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::{
    ActivityBucket, ActivityQuery, AuditId, ConsoleSession, ConsoleStore, Result, TenantId,
    Timestamp, TokenId,
};
use rusqlite::{named_params, OptionalExtension, Row};

use crate::error::SqliteError;
use crate::store::SqliteStore;

const AUDIT_COLUMNS: &str = "id, at, tenant, actor, action, target, detail, source";
const SESSION_COLUMNS: &str = "id_hash, token, tenant, read_only, csrf, created_at, expires_at";

fn bad(what: &'static str) -> impl Fn(outboxkit_core::Error) -> SqliteError {
    move |_| SqliteError::Corrupt(what)
}

fn audit_row(row: &Row<'_>) -> rusqlite::Result<Result<AuditEntry, SqliteError>> {
    let id: String = row.get(0)?;
    let at: i64 = row.get(1)?;
    let tenant: Option<String> = row.get(2)?;
    let (actor, action, target, detail): (String, String, String, String) =
        (row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?);
    let source: Option<String> = row.get(7)?;
    Ok((|| {
        Ok(AuditEntry {
            id: AuditId::parse(&id).map_err(bad("audit id"))?,
            at: Timestamp::from_unix_millis(at).map_err(bad("audit time"))?,
            tenant: tenant
                .map(TenantId::new)
                .transpose()
                .map_err(bad("audit tenant"))?,
            actor,
            action,
            target,
            detail,
            source,
        })
    })())
}

fn session_row(row: &Row<'_>) -> rusqlite::Result<Result<ConsoleSession, SqliteError>> {
    let hash: Vec<u8> = row.get(0)?;
    let token: String = row.get(1)?;
    let tenant: Option<String> = row.get(2)?;
    let read_only: bool = row.get(3)?;
    let csrf: String = row.get(4)?;
    let created: i64 = row.get(5)?;
    let expires: i64 = row.get(6)?;
    Ok((|| {
        Ok(ConsoleSession {
            id_hash: hash
                .try_into()
                .map_err(|_| SqliteError::Corrupt("session hash"))?,
            token: TokenId::parse(&token).map_err(bad("session token"))?,
            scope: match tenant {
                Some(t) => TokenScope::Tenant(TenantId::new(t).map_err(bad("session tenant"))?),
                None => TokenScope::Admin,
            },
            read_only,
            csrf,
            created_at: Timestamp::from_unix_millis(created).map_err(bad("session time"))?,
            expires_at: Timestamp::from_unix_millis(expires).map_err(bad("session time"))?,
        })
    })())
}

/// Activity by bucket: each attempt of the tenant (and endpoint) finished in the range,
/// the last attempt of a delivery now `dead` counted as dead when it failed. The attempts are
/// the ledger's rows and the ones kept in their delivery's row (schema 16: a delivery that
/// finished at its first attempt, which is then its last).
const ACTIVITY: &str = "\
    SELECT (a.finished_at - :since) / :bucket AS b, \
           sum(a.outcome = 'succeeded'), \
           sum(a.outcome <> 'succeeded' AND NOT (d.status = 'dead' AND a.last)), \
           sum(a.outcome <> 'succeeded' AND d.status = 'dead' AND a.last), \
           coalesce(sum(CASE WHEN a.outcome = 'succeeded' THEN max(a.finished_at - a.started_at, 0) END), 0), \
           coalesce(max(CASE WHEN a.outcome = 'succeeded' THEN max(a.finished_at - a.started_at, 0) END), 0) \
      FROM outbox_deliveries AS d JOIN ( \
           SELECT l.delivery_seq, l.outcome, l.started_at, l.finished_at, \
                  l.number = (SELECT max(m.number) FROM outbox_attempts AS m \
                               WHERE m.delivery_seq = l.delivery_seq) AS last \
             FROM outbox_attempts AS l \
           UNION ALL \
           SELECT f.seq, f.last_outcome, f.folded_started_at, f.last_at, 1 \
             FROM outbox_deliveries AS f WHERE f.folded_started_at IS NOT NULL \
           ) AS a ON a.delivery_seq = d.seq \
     WHERE d.tenant = :tenant \
       AND (:endpoint IS NULL OR (d.kind = 'webhook' AND d.target = :endpoint)) \
       AND a.finished_at >= :since AND a.finished_at < :until \
     GROUP BY b";

#[async_trait]
impl ConsoleStore for SqliteStore {
    async fn record_audit(&self, entry: &AuditEntry) -> Result<()> {
        entry.validate()?;
        let e = entry.clone();
        self.pool()
            .write(move |conn| {
                conn.execute(
                    &format!(
                        "INSERT INTO outbox_audit ({AUDIT_COLUMNS}) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                    ),
                    rusqlite::params![
                        e.id.to_string(),
                        e.at.as_unix_millis(),
                        e.tenant.as_ref().map(TenantId::as_str),
                        e.actor,
                        e.action,
                        e.target,
                        e.detail,
                        e.source,
                    ],
                )?;
                Ok(())
            })
            .await
    }

    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        check_audit_limit(limit)?;
        let tenant = tenant.map(|t| t.as_str().to_owned());
        self.pool()
            .read(move |conn| {
                let sql = format!(
                    "SELECT {AUDIT_COLUMNS} FROM outbox_audit \
                     WHERE (:tenant IS NULL OR tenant = :tenant) \
                       AND (:at IS NULL OR (at, id) < (:at, :id)) \
                     ORDER BY at DESC, id DESC LIMIT :n"
                );
                let mut st = conn.prepare_cached(&sql)?;
                let rows = st.query_map(
                    named_params! {
                        ":tenant": tenant,
                        ":at": after.map(|c| c.at.as_unix_millis()),
                        ":id": after.map(|c| c.id.to_string()),
                        ":n": i64::from(limit) + 1,
                    },
                    audit_row,
                )?;
                let mut out = Vec::new();
                for r in rows {
                    out.push(r??);
                }
                Ok(AuditPage::from_sorted(out, limit))
            })
            .await
    }

    async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64> {
        check_purge_limit(limit)?;
        self.pool()
            .write(move |conn| {
                let n = conn.execute(
                    "DELETE FROM outbox_audit WHERE id IN \
                     (SELECT id FROM outbox_audit WHERE at < ?1 ORDER BY at, id LIMIT ?2)",
                    rusqlite::params![before.as_unix_millis(), limit],
                )?;
                Ok(n as u64)
            })
            .await
    }

    async fn put_session(&self, session: &ConsoleSession, now: Timestamp) -> Result<()> {
        session.validate()?;
        let s = session.clone();
        self.pool()
            .write(move |conn| {
                let tx = conn.transaction()?;
                tx.execute(
                    "DELETE FROM outbox_console_sessions WHERE expires_at <= ?1",
                    [now.as_unix_millis()],
                )?;
                tx.execute(
                    &format!(
                        "INSERT OR REPLACE INTO outbox_console_sessions ({SESSION_COLUMNS}) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                    ),
                    rusqlite::params![
                        s.id_hash.as_slice(),
                        s.token.to_string(),
                        s.scope.tenant().map(TenantId::as_str),
                        s.read_only,
                        s.csrf,
                        s.created_at.as_unix_millis(),
                        s.expires_at.as_unix_millis(),
                    ],
                )?;
                // The token's newest MAX sessions stay.
                tx.execute(
                    "DELETE FROM outbox_console_sessions WHERE token = ?1 AND id_hash NOT IN \
                     (SELECT id_hash FROM outbox_console_sessions WHERE token = ?1 \
                      ORDER BY created_at DESC, id_hash DESC LIMIT ?2)",
                    rusqlite::params![s.token.to_string(), MAX_SESSIONS_PER_TOKEN as i64],
                )?;
                tx.commit()?;
                Ok(())
            })
            .await
    }

    async fn get_session(
        &self,
        id_hash: &[u8; 32],
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>> {
        let h = *id_hash;
        self.pool()
            .read(move |conn| {
                let found = conn
                    .query_row(
                        &format!(
                            "SELECT {SESSION_COLUMNS} FROM outbox_console_sessions \
                             WHERE id_hash = ?1 AND expires_at > ?2"
                        ),
                        rusqlite::params![h.as_slice(), now.as_unix_millis()],
                        session_row,
                    )
                    .optional()?;
                found.transpose()
            })
            .await
    }

    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
        let h = *id_hash;
        self.pool()
            .write(move |conn| {
                let n = conn.execute(
                    "DELETE FROM outbox_console_sessions WHERE id_hash = ?1",
                    [h.as_slice()],
                )?;
                Ok(n > 0)
            })
            .await
    }

    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
        self.pool()
            .write(move |conn| {
                let n = conn.execute(
                    "DELETE FROM outbox_console_sessions WHERE token = ?1",
                    [token.to_string()],
                )?;
                Ok(n as u64)
            })
            .await
    }

    async fn activity(&self, query: &ActivityQuery) -> Result<Vec<ActivityBucket>> {
        query.validate()?;
        let q = query.clone();
        self.pool()
            .read(move |conn| {
                let mut out = q.empty_buckets();
                let mut st = conn.prepare_cached(ACTIVITY)?;
                let mut rows = st.query(named_params! {
                    ":since": q.since.as_unix_millis(),
                    ":until": q.until.as_unix_millis(),
                    ":bucket": q.bucket_millis(),
                    ":tenant": q.tenant.as_str(),
                    ":endpoint": q.endpoint.map(|e| e.to_string()),
                })?;
                while let Some(r) = rows.next()? {
                    let i: i64 = r.get(0)?;
                    let Some(b) = usize::try_from(i).ok().and_then(|i| out.get_mut(i)) else {
                        return Err(SqliteError::Corrupt("activity bucket"));
                    };
                    let n = |k: usize| -> rusqlite::Result<u64> {
                        Ok(r.get::<_, Option<i64>>(k)?.unwrap_or(0).max(0) as u64)
                    };
                    b.succeeded = n(1)?;
                    b.failed = n(2)?;
                    b.dead = n(3)?;
                    b.latency_total_ms = n(4)?;
                    b.latency_max_ms = n(5)?;
                }
                Ok(out)
            })
            .await
    }
}
