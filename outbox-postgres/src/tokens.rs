//! [`TokenStore`] on PostgreSQL: the `api_tokens` table of migration 5.

use async_trait::async_trait;
use outboxkit_core::tokens::{ApiToken, TokenHash, TokenScope, TokenStore};
use outboxkit_core::{Error, ErrorKind, Result, TenantId, Timestamp, TokenId};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::map_err;
use crate::store::PostgresStore;

const COLUMNS: &str = "id, label, tenant, read_only, hash, created_at, revoked_at";

impl PostgresStore {
    fn tokens_table(&self) -> String {
        format!("\"{}\".api_tokens", self.inner.config.schema)
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

fn token(row: &PgRow) -> Result<ApiToken> {
    let id: Uuid = row.try_get("id").map_err(map_err)?;
    let tenant: Option<String> = row.try_get("tenant").map_err(map_err)?;
    let hash: Vec<u8> = row.try_get("hash").map_err(map_err)?;
    let created: i64 = row.try_get("created_at").map_err(map_err)?;
    let revoked: Option<i64> = row.try_get("revoked_at").map_err(map_err)?;
    Ok(ApiToken {
        id: TokenId::from_uuid(id).map_err(corrupt("id"))?,
        label: row.try_get("label").map_err(map_err)?,
        scope: match tenant {
            Some(t) => TokenScope::Tenant(TenantId::new(t).map_err(corrupt("tenant"))?),
            None => TokenScope::Admin,
        },
        read_only: row.try_get("read_only").map_err(map_err)?,
        hash: TokenHash::from_bytes(&hash).map_err(corrupt("hash"))?,
        created_at: Timestamp::from_unix_millis(created).map_err(corrupt("created_at"))?,
        revoked_at: revoked
            .map(Timestamp::from_unix_millis)
            .transpose()
            .map_err(corrupt("revoked_at"))?,
    })
}

#[async_trait]
impl TokenStore for PostgresStore {
    async fn create_token(&self, t: &ApiToken) -> Result<()> {
        t.validate()?;
        let sql = format!(
            "INSERT INTO {} ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            self.tokens_table()
        );
        sqlx::query(&sql)
            .bind(t.id.as_uuid())
            .bind(&t.label)
            .bind(t.scope.tenant().map(TenantId::as_str))
            .bind(t.read_only)
            .bind(t.hash.as_bytes().as_slice())
            .bind(t.created_at.as_unix_millis())
            .bind(t.revoked_at.map(Timestamp::as_unix_millis))
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn get_token(&self, id: TokenId) -> Result<ApiToken> {
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE id = $1",
            self.tokens_table()
        );
        let row = sqlx::query(&sql)
            .bind(id.as_uuid())
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(map_err)?;
        row.as_ref()
            .map(token)
            .transpose()?
            .ok_or_else(|| Error::not_found("token"))
    }

    async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM {} ORDER BY created_at, id",
            self.tokens_table()
        );
        let rows = sqlx::query(&sql)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(token).collect()
    }

    async fn revoke_token(&self, id: TokenId, at: Timestamp) -> Result<ApiToken> {
        let sql = format!(
            "UPDATE {} SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1 \
             RETURNING {COLUMNS}",
            self.tokens_table()
        );
        let row = sqlx::query(&sql)
            .bind(id.as_uuid())
            .bind(at.as_unix_millis())
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(map_err)?;
        row.as_ref()
            .map(token)
            .transpose()?
            .ok_or_else(|| Error::not_found("token"))
    }
}
