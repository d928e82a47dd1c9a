//! [`ConsoleStore`] on Redis.
//!
//! - Audit: each entry as JSON in one hash (`<prefix>:audit:e`, id → entry), indexed by time
//!   in a sorted set over all (`<prefix>:audit`) and one per tenant
//!   (`<prefix>:audit:t:<tenant>`), members the ids' hex (ties at one millisecond sort by id).
//!   Capped at [`AUDIT_CAP`] entries, oldest removed first, beside `purge_audit`.
//! - Sessions: a hash per session (`<prefix>:session:<hash hex>`) expiring with it, an
//!   expiry index (`<prefix>:sessions:exp`) and one per token (`<prefix>:sessions:t:<id>`).
//! - Activity: completion adds each attempted delivery to `<shard>:tx:<tenant>` scored by
//!   the time of its latest attempt (one `ZADD` per attempt, the only hot-path cost;
//!   retention removes it with the delivery); a query reads the deliveries attempted since
//!   its start and counts their attempts as the in-memory store does.

use std::collections::HashMap;

use async_trait::async_trait;
use outboxkit_core::audit::{check_audit_limit, AuditCursor, AuditEntry, AuditPage};
use outboxkit_core::console_store::{ActivityAttempt, ActivityKind, MAX_SESSIONS_PER_TOKEN};
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::{
    ActivityBucket, ActivityQuery, ConsoleSession, ConsoleStore, DeliveryId, DeliveryStatus, Error,
    ErrorKind, PayloadFingerprint, Result, TenantId, Timestamp, TokenId,
};
use redis::{Script, Value};

use crate::entry::attempt;
use crate::error::{corrupt, redis_err};
use crate::rows::{delivery, exists, int, items};
use crate::store::RedisStore;

/// The most audit entries kept; past it the oldest go first.
pub const AUDIT_CAP: i64 = 100_000;

/// ARGV: prefix, id hex, at, tenant ('' for admin), json, cap. 1 when written, 0 when the
/// id exists.
const RECORD: &str = r"
local P = ARGV[1]
local H, G = P .. ':audit:e', P .. ':audit'
if redis.call('HSETNX', H, ARGV[2], ARGV[5]) == 0 then return 0 end
redis.call('ZADD', G, ARGV[3], ARGV[2])
if ARGV[4] ~= '' then redis.call('ZADD', P .. ':audit:t:' .. ARGV[4], ARGV[3], ARGV[2]) end
local over = redis.call('ZCARD', G) - tonumber(ARGV[6])
if over > 0 then
  for _, id in ipairs(redis.call('ZRANGE', G, 0, over - 1)) do
    local e = redis.call('HGET', H, id)
    local t = e and cjson.decode(e).tenant
    if type(t) == 'string' then redis.call('ZREM', P .. ':audit:t:' .. t, id) end
    redis.call('HDEL', H, id)
  end
  redis.call('ZREMRANGEBYRANK', G, 0, over - 1)
end
return 1
";

/// ARGV: prefix, before (exclusive), limit. How many were removed.
const PURGE: &str = r"
local P = ARGV[1]
local H, G = P .. ':audit:e', P .. ':audit'
local ids = redis.call('ZRANGE', G, '-inf', '(' .. ARGV[2], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  local e = redis.call('HGET', H, id)
  local t = e and cjson.decode(e).tenant
  if type(t) == 'string' then redis.call('ZREM', P .. ':audit:t:' .. t, id) end
  redis.call('HDEL', H, id)
  redis.call('ZREM', G, id)
end
return #ids
";

/// ARGV: prefix, hash hex, token, now, ttl ms, max, expires_at, created_at, then field/value
/// pairs.
const PUT_SESSION: &str = r"
local P, h, tok, now, max = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[6])
local exp = P .. ':sessions:exp'
local function drop(x)
  local sk = P .. ':session:' .. x
  local t = redis.call('HGET', sk, 'token')
  if t then redis.call('ZREM', P .. ':sessions:t:' .. t, x) end
  redis.call('ZREM', exp, x)
  return redis.call('DEL', sk)
end
for _, x in ipairs(redis.call('ZRANGE', exp, '-inf', now, 'BYSCORE')) do drop(x) end
drop(h)
local sk = P .. ':session:' .. h
redis.call('HSET', sk, unpack(ARGV, 9))
redis.call('PEXPIRE', sk, ARGV[5])
redis.call('ZADD', exp, ARGV[7], h)
local tk = P .. ':sessions:t:' .. tok
redis.call('ZADD', tk, ARGV[8], h)
local over = redis.call('ZCARD', tk) - max
if over > 0 then
  for _, x in ipairs(redis.call('ZRANGE', tk, 0, over - 1)) do drop(x) end
end
return 1
";

/// ARGV: prefix, then hash hexes. How many existed.
const DROP_SESSIONS: &str = r"
local P, exp, n = ARGV[1], ARGV[1] .. ':sessions:exp', 0
for i = 2, #ARGV do
  local x = ARGV[i]
  local sk = P .. ':session:' .. x
  local t = redis.call('HGET', sk, 'token')
  if t then redis.call('ZREM', P .. ':sessions:t:' .. t, x) end
  redis.call('ZREM', exp, x)
  n = n + redis.call('DEL', sk)
end
return n
";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl RedisStore {
    fn session_key(&self, id_hash: &[u8; 32]) -> String {
        format!("{}:session:{}", self.prefix(), hex(id_hash))
    }

    async fn drop_sessions(&self, hashes: &[String]) -> Result<u64> {
        let mut conn = self.connection();
        let script = Script::new(DROP_SESSIONS);
        let mut inv = script.prepare_invoke();
        inv.key(self.prefix()).arg(self.prefix());
        for h in hashes {
            inv.arg(h);
        }
        let n: i64 = inv.invoke_async(&mut conn).await.map_err(redis_err)?;
        Ok(n.max(0) as u64)
    }
}

fn decode_session(f: &HashMap<String, String>) -> Result<ConsoleSession> {
    let get = |k: &str| f.get(k).ok_or_else(|| corrupt("session"));
    let ms = |k: &str| -> Result<Timestamp> {
        let v: i64 = get(k)?.parse().map_err(|_| corrupt("session"))?;
        Timestamp::from_unix_millis(v).map_err(|_| corrupt("session"))
    };
    let tenant = get("tenant")?;
    Ok(ConsoleSession {
        id_hash: unhex(get("id_hash")?).ok_or_else(|| corrupt("session"))?,
        token: TokenId::parse(get("token")?).map_err(|_| corrupt("session"))?,
        scope: if tenant.is_empty() {
            TokenScope::Admin
        } else {
            TokenScope::Tenant(TenantId::new(tenant.as_str()).map_err(|_| corrupt("session"))?)
        },
        read_only: get("read_only")? == "1",
        csrf: get("csrf")?.clone(),
        created_at: ms("created_at")?,
        expires_at: ms("expires_at")?,
    })
}

#[async_trait]
impl ConsoleStore for RedisStore {
    async fn record_audit(&self, e: &AuditEntry) -> Result<()> {
        e.validate()?;
        let json = serde_json::to_string(e).map_err(|_| corrupt("audit"))?;
        let mut conn = self.connection();
        let script = Script::new(RECORD);
        let written: i64 = script
            .key(self.prefix())
            .arg(self.prefix())
            .arg(e.id.as_uuid().simple().to_string())
            .arg(e.at.as_unix_millis())
            .arg(e.tenant.as_ref().map_or("", TenantId::as_str))
            .arg(json)
            .arg(AUDIT_CAP)
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err)?;
        if written == 0 {
            return Err(Error::new(ErrorKind::Conflict, "the audit entry exists"));
        }
        Ok(())
    }

    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        check_audit_limit(limit)?;
        let index = match tenant {
            Some(t) => format!("{}:audit:t:{}", self.prefix(), t.as_str()),
            None => format!("{}:audit", self.prefix()),
        };
        let max = after.map_or("+inf".to_owned(), |c| c.at.as_unix_millis().to_string());
        let want = limit as usize + 1;
        let mut conn = self.connection();
        let mut out: Vec<AuditEntry> = Vec::new();
        let mut offset = 0usize;
        while out.len() < want {
            let n = want - out.len() + 8;
            let ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(&index)
                .arg(&max)
                .arg("-inf")
                .arg("BYSCORE")
                .arg("REV")
                .arg("LIMIT")
                .arg(offset)
                .arg(n)
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            offset += ids.len();
            if !ids.is_empty() {
                let found: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(format!("{}:audit:e", self.prefix()))
                    .arg(&ids)
                    .query_async(&mut conn)
                    .await
                    .map_err(redis_err)?;
                for json in found.into_iter().flatten() {
                    let e: AuditEntry =
                        serde_json::from_str(&json).map_err(|_| corrupt("audit"))?;
                    if after.is_none_or(|c| c.precedes(&e)) {
                        out.push(e);
                    }
                }
            }
            if ids.len() < n {
                break;
            }
        }
        out.truncate(want);
        Ok(AuditPage::from_sorted(out, limit))
    }

    async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64> {
        check_purge_limit(limit)?;
        let mut conn = self.connection();
        let n: i64 = Script::new(PURGE)
            .key(self.prefix())
            .arg(self.prefix())
            .arg(before.as_unix_millis())
            .arg(limit)
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err)?;
        Ok(n.max(0) as u64)
    }

    async fn put_session(&self, s: &ConsoleSession, now: Timestamp) -> Result<()> {
        s.validate()?;
        let ttl = s.expires_at.duration_since(now).as_millis().max(1) as u64;
        let mut conn = self.connection();
        let script = Script::new(PUT_SESSION);
        let mut inv = script.prepare_invoke();
        inv.key(self.prefix())
            .arg(self.prefix())
            .arg(hex(&s.id_hash))
            .arg(s.token.to_string())
            .arg(now.as_unix_millis())
            .arg(ttl)
            .arg(MAX_SESSIONS_PER_TOKEN)
            .arg(s.expires_at.as_unix_millis())
            .arg(s.created_at.as_unix_millis())
            .arg("id_hash")
            .arg(hex(&s.id_hash))
            .arg("token")
            .arg(s.token.to_string())
            .arg("tenant")
            .arg(s.scope.tenant().map_or("", TenantId::as_str))
            .arg("read_only")
            .arg(if s.read_only { "1" } else { "0" })
            .arg("csrf")
            .arg(&s.csrf)
            .arg("created_at")
            .arg(s.created_at.as_unix_millis())
            .arg("expires_at")
            .arg(s.expires_at.as_unix_millis());
        let _: i64 = inv.invoke_async(&mut conn).await.map_err(redis_err)?;
        Ok(())
    }

    async fn get_session(
        &self,
        id_hash: &[u8; 32],
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>> {
        let mut conn = self.connection();
        let f: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(self.session_key(id_hash))
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        if f.is_empty() {
            return Ok(None);
        }
        let s = decode_session(&f)?;
        Ok(s.live_at(now).then_some(s))
    }

    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
        Ok(self.drop_sessions(&[hex(id_hash)]).await? > 0)
    }

    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
        let mut conn = self.connection();
        let hashes: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("{}:sessions:t:{}", self.prefix(), token))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        if hashes.is_empty() {
            return Ok(0);
        }
        self.drop_sessions(&hashes).await
    }

    async fn activity(&self, q: &ActivityQuery) -> Result<Vec<ActivityBucket>> {
        q.validate()?;
        let mut counted = Vec::new();
        let none = PayloadFingerprint::of(&[]);
        let mut conn = self.connection();
        for shard in 0..self.shard_count() {
            let index = self.key(shard, "tx", q.tenant.as_str());
            let ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(&index)
                .arg(q.since.as_unix_millis())
                .arg("+inf")
                .arg("BYSCORE")
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            for chunk in ids.chunks(200) {
                let mut pipe = redis::pipe();
                for id in chunk {
                    pipe.cmd("HMGET")
                        .arg(self.key(shard, "d", id))
                        .arg(&["h", "s", "v", "l", "r", "tr"]);
                    pipe.cmd("LRANGE")
                        .arg(self.key(shard, "a", id))
                        .arg(0)
                        .arg(-1);
                }
                let replies: Vec<Value> = pipe.query_async(&mut conn).await.map_err(redis_err)?;
                for (pair, id) in replies.chunks(2).zip(chunk) {
                    let row = items(pair[0].clone())?;
                    if !exists(&row) {
                        continue;
                    }
                    let d = delivery(&row[..5])?;
                    if d.tenant != q.tenant
                        || q.endpoint
                            .is_some_and(|e| d.destination.endpoint() != Some(e))
                    {
                        continue;
                    }
                    let id = DeliveryId::parse(id).map_err(|_| corrupt("delivery"))?;
                    let dropped = row.get(5).and_then(int).unwrap_or(0);
                    let first = u32::try_from(dropped).map_err(|_| corrupt("attempt"))?;
                    let list = items(pair[1].clone())?;
                    let last = first + list.len() as u32;
                    for (i, v) in list.iter().enumerate() {
                        let a = attempt(id, first + i as u32 + 1, v, &none)?;
                        let last_of_dead = d.status == DeliveryStatus::Dead && a.number == last;
                        counted.push(ActivityAttempt {
                            finished_at: a.record.finished_at,
                            kind: ActivityKind::of(a.record.outcome, last_of_dead),
                            millis: a.duration().as_millis() as u64,
                        });
                    }
                }
            }
        }
        Ok(q.tally(counted))
    }
}
