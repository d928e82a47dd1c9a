//! [`TokenStore`] on SQLite: the `outbox_api_tokens` table of migrations 5 and 7.

use async_trait::async_trait;
use outboxkit_core::tokens::{ApiToken, TokenAccess, TokenHash, TokenScope, TokenStore};
use outboxkit_core::{Error, Result, TenantId, Timestamp, TokenId};
use rusqlite::{OptionalExtension, Row};

use crate::error::SqliteError;
use crate::store::SqliteStore;

const COLUMNS: &str = "id, label, tenant, read_only, enqueue_only, hash, created_at, revoked_at";

fn token(row: &Row<'_>) -> rusqlite::Result<Result<ApiToken, SqliteError>> {
    let id: String = row.get("id")?;
    let label: String = row.get("label")?;
    let tenant: Option<String> = row.get("tenant")?;
    let read_only: bool = row.get("read_only")?;
    let enqueue_only: bool = row.get("enqueue_only")?;
    let hash: Vec<u8> = row.get("hash")?;
    let created: i64 = row.get("created_at")?;
    let revoked: Option<i64> = row.get("revoked_at")?;
    Ok(decode(
        id,
        label,
        tenant,
        (read_only, enqueue_only),
        hash,
        created,
        revoked,
    ))
}

fn decode(
    id: String,
    label: String,
    tenant: Option<String>,
    (read_only, enqueue_only): (bool, bool),
    hash: Vec<u8>,
    created: i64,
    revoked: Option<i64>,
) -> Result<ApiToken, SqliteError> {
    let bad = |c: &'static str| move |_| SqliteError::Corrupt(c);
    Ok(ApiToken {
        id: TokenId::parse(&id).map_err(bad("token id"))?,
        label,
        scope: match tenant {
            Some(t) => TokenScope::Tenant(TenantId::new(t).map_err(bad("token tenant"))?),
            None => TokenScope::Admin,
        },
        access: TokenAccess::from_flags(read_only, enqueue_only).map_err(bad("token access"))?,
        hash: TokenHash::from_bytes(&hash).map_err(bad("token hash"))?,
        created_at: Timestamp::from_unix_millis(created).map_err(bad("token time"))?,
        revoked_at: revoked
            .map(Timestamp::from_unix_millis)
            .transpose()
            .map_err(bad("token time"))?,
    })
}

#[async_trait]
impl TokenStore for SqliteStore {
    async fn create_token(&self, t: &ApiToken) -> Result<()> {
        t.validate()?;
        let t = t.clone();
        let (read_only, enqueue_only) = t.access.flags();
        self.pool()
            .write(move |conn| {
                conn.execute(
                    &format!(
                        "INSERT INTO outbox_api_tokens ({COLUMNS}) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                    ),
                    rusqlite::params![
                        t.id.to_string(),
                        t.label,
                        t.scope.tenant().map(TenantId::as_str),
                        read_only,
                        enqueue_only,
                        t.hash.as_bytes().as_slice(),
                        t.created_at.as_unix_millis(),
                        t.revoked_at.map(Timestamp::as_unix_millis),
                    ],
                )?;
                Ok(())
            })
            .await
    }

    async fn get_token(&self, id: TokenId) -> Result<ApiToken> {
        self.pool()
            .read(move |conn| {
                let found = conn
                    .query_row(
                        &format!("SELECT {COLUMNS} FROM outbox_api_tokens WHERE id = ?1"),
                        [id.to_string()],
                        token,
                    )
                    .optional()?;
                match found {
                    Some(t) => t,
                    None => Err(Error::not_found("token").into()),
                }
            })
            .await
    }

    async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        self.pool()
            .read(|conn| {
                let mut st = conn.prepare(&format!(
                    "SELECT {COLUMNS} FROM outbox_api_tokens ORDER BY created_at, id"
                ))?;
                let rows = st.query_map([], token)?;
                let mut out = Vec::new();
                for r in rows {
                    out.push(r??);
                }
                Ok(out)
            })
            .await
    }

    async fn revoke_token(&self, id: TokenId, at: Timestamp) -> Result<ApiToken> {
        self.pool()
            .write(move |conn| {
                let found = conn
                    .query_row(
                        &format!(
                            "UPDATE outbox_api_tokens SET revoked_at = coalesce(revoked_at, ?2) \
                             WHERE id = ?1 RETURNING {COLUMNS}"
                        ),
                        rusqlite::params![id.to_string(), at.as_unix_millis()],
                        token,
                    )
                    .optional()?;
                match found {
                    Some(t) => t,
                    None => Err(Error::not_found("token").into()),
                }
            })
            .await
    }
}
