//! [`TokenStore`] on PostgreSQL: the `api_tokens` table of migrations 5 and 8.

use async_trait::async_trait;
use outboxkit_core::tokens::{ApiToken, TokenAccess, TokenHash, TokenScope, TokenStore};
use outboxkit_core::{Error, ErrorKind, Result, TenantId, Timestamp, TokenId};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::map_err;
use crate::sql::{self, Params, Statement};
use crate::store::PostgresStore;

impl PostgresStore {
    /// A statement of `sql/tokens.sql` on this store's schema.
    fn token_statement(&self, name: &str) -> Result<Statement> {
        let table = format!("\"{}\".api_tokens", self.inner.config.schema);
        sql::load(sql::TOKENS, name, &[("api_tokens", &table)])
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
        access: TokenAccess::from_flags(
            row.try_get("read_only").map_err(map_err)?,
            row.try_get("enqueue_only").map_err(map_err)?,
        )
        .map_err(corrupt("enqueue_only"))?,
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
        let statement = self.token_statement("create_token")?;
        let (read_only, enqueue_only) = t.access.flags();
        let params = Params::new()
            .set("id", t.id.as_uuid())
            .set("label", t.label.as_str())
            .set("tenant", t.scope.tenant().map(TenantId::as_str))
            .set("read_only", read_only)
            .set("enqueue_only", enqueue_only)
            .set("hash", t.hash.as_bytes().as_slice())
            .set("created_at", t.created_at.as_unix_millis())
            .set("revoked_at", t.revoked_at.map(Timestamp::as_unix_millis));
        statement
            .bind(params)?
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn get_token(&self, id: TokenId) -> Result<ApiToken> {
        let statement = self.token_statement("get_token")?;
        let row = statement
            .bind(Params::new().set("id", id.as_uuid()))?
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(map_err)?;
        row.as_ref()
            .map(token)
            .transpose()?
            .ok_or_else(|| Error::not_found("token"))
    }

    async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        let statement = self.token_statement("list_tokens")?;
        let rows = statement
            .bind(Params::new())?
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(token).collect()
    }

    async fn revoke_token(&self, id: TokenId, at: Timestamp) -> Result<ApiToken> {
        let statement = self.token_statement("revoke_token")?;
        let params = Params::new()
            .set("id", id.as_uuid())
            .set("at", at.as_unix_millis());
        let row = statement
            .bind(params)?
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(map_err)?;
        row.as_ref()
            .map(token)
            .transpose()?
            .ok_or_else(|| Error::not_found("token"))
    }
}
