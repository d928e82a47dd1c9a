//! [`TokenStore`] on Redis: a hash per token (`<prefix>:token:<id>`) and a sorted set of
//! ids by creation time (`<prefix>:tokens`), written together by one script.

use std::collections::HashMap;

use async_trait::async_trait;
use outboxkit_core::tokens::{ApiToken, TokenAccess, TokenHash, TokenScope, TokenStore};
use outboxkit_core::{Error, ErrorKind, Result, TenantId, Timestamp, TokenId};
use redis::Script;

use crate::error::{corrupt, redis_err};
use crate::store::RedisStore;

/// KEYS: token hash, index. ARGV: id, created_at, then field/value pairs. 1 when written,
/// 0 when the id exists.
const CREATE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
";

/// KEYS: token hash. ARGV: revoked_at. The token's fields, or nothing when it is missing.
const REVOKE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSETNX', KEYS[1], 'revoked_at', ARGV[1])
return redis.call('HGETALL', KEYS[1])
";

impl RedisStore {
    fn token_key(&self, id: TokenId) -> String {
        format!("{}:token:{}", self.prefix(), id.as_uuid().simple())
    }

    fn tokens_index(&self) -> String {
        format!("{}:tokens", self.prefix())
    }
}

/// The field that holds an enqueue-only token's digest, in place of `hash`: a version from
/// before enqueue-only tokens finds no `hash` and refuses the token, rather than reading it
/// as one with full access.
const ENQUEUE_ONLY_HASH: &str = "enqueue_only_hash";

fn decode(id: TokenId, f: &HashMap<String, Vec<u8>>) -> Result<ApiToken> {
    let text = |k: &str| -> Result<String> {
        let v = f.get(k).ok_or_else(|| corrupt("token"))?;
        String::from_utf8(v.clone()).map_err(|_| corrupt("token"))
    };
    let millis = |k: &str| -> Result<Timestamp> {
        let ms: i64 = text(k)?.parse().map_err(|_| corrupt("token"))?;
        Timestamp::from_unix_millis(ms).map_err(|_| corrupt("token"))
    };
    let tenant = text("tenant")?;
    let enqueue_only = f.contains_key(ENQUEUE_ONLY_HASH);
    let hash_field = if enqueue_only {
        ENQUEUE_ONLY_HASH
    } else {
        "hash"
    };
    Ok(ApiToken {
        id,
        label: text("label")?,
        scope: if tenant.is_empty() {
            TokenScope::Admin
        } else {
            TokenScope::Tenant(TenantId::new(tenant).map_err(|_| corrupt("token"))?)
        },
        access: TokenAccess::from_flags(text("read_only")? == "1", enqueue_only)
            .map_err(|_| corrupt("token"))?,
        hash: TokenHash::from_bytes(f.get(hash_field).ok_or_else(|| corrupt("token"))?)
            .map_err(|_| corrupt("token"))?,
        created_at: millis("created_at")?,
        revoked_at: if f.contains_key("revoked_at") {
            Some(millis("revoked_at")?)
        } else {
            None
        },
    })
}

#[async_trait]
impl TokenStore for RedisStore {
    async fn create_token(&self, t: &ApiToken) -> Result<()> {
        t.validate()?;
        let mut conn = self.connection();
        let script = Script::new(CREATE);
        let mut inv = script.prepare_invoke();
        inv.key(self.token_key(t.id))
            .key(self.tokens_index())
            .arg(t.id.as_uuid().simple().to_string())
            .arg(t.created_at.as_unix_millis())
            .arg("label")
            .arg(&t.label)
            .arg("tenant")
            .arg(t.scope.tenant().map_or("", TenantId::as_str))
            .arg("read_only")
            .arg(if t.access == TokenAccess::ReadOnly {
                "1"
            } else {
                "0"
            })
            .arg(if t.access == TokenAccess::EnqueueOnly {
                ENQUEUE_ONLY_HASH
            } else {
                "hash"
            })
            .arg(t.hash.as_bytes().as_slice())
            .arg("created_at")
            .arg(t.created_at.as_unix_millis());
        if let Some(r) = t.revoked_at {
            inv.arg("revoked_at").arg(r.as_unix_millis());
        }
        let written: i64 = inv.invoke_async(&mut conn).await.map_err(redis_err)?;
        if written == 0 {
            return Err(Error::new(ErrorKind::Conflict, "the token exists"));
        }
        Ok(())
    }

    async fn get_token(&self, id: TokenId) -> Result<ApiToken> {
        let mut conn = self.connection();
        let f: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(self.token_key(id))
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        if f.is_empty() {
            return Err(Error::not_found("token"));
        }
        decode(id, &f)
    }

    async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        let mut conn = self.connection();
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(self.tokens_index())
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let id = TokenId::parse(&id).map_err(|_| corrupt("token"))?;
            out.push(self.get_token(id).await?);
        }
        out.sort_by_key(|t| (t.created_at, t.id));
        Ok(out)
    }

    async fn revoke_token(&self, id: TokenId, at: Timestamp) -> Result<ApiToken> {
        let mut conn = self.connection();
        let f: Option<HashMap<String, Vec<u8>>> = Script::new(REVOKE)
            .key(self.token_key(id))
            .arg(at.as_unix_millis())
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err)?;
        match f {
            Some(f) if !f.is_empty() => decode(id, &f),
            _ => Err(Error::not_found("token")),
        }
    }
}
