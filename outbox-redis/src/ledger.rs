//! [`Ledger`] for [`RedisStore`]: listings, single reads, attempts and retention.

use async_trait::async_trait;
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::{
    Attempt, Cursor, Delivery, DeliveryFilter, DeliveryId, Error, Ledger, Message, MessageId, Page,
    PageRequest, PayloadFingerprint, PurgeReport, Result, RetentionCutoffs, TenantId, TenantStats,
    Timestamp,
};
use redis::Value;

use crate::entry::attempt;
use crate::error::{corrupt, redis_err};
use crate::rows::{delivery, exists, int, items, message, text, Args};
use crate::store::RedisStore;

/// The fields a delivery is read from (see `scripts/common.lua`).
const DELIVERY_FIELDS: [&str; 5] = ["h", "s", "v", "l", "r"];

/// The fields a message is read from.
const MESSAGE_FIELDS: [&str; 2] = ["p", "x"];

impl RedisStore {
    /// The key `<shard's prefix>:<kind>:<id>`.
    pub(crate) fn key(&self, shard: usize, kind: &str, id: impl std::fmt::Display) -> String {
        format!("{}:{kind}:{id}", self.inner.shards[shard])
    }

    /// The first shard holding hash `kind:id` with its fields, or `None`.
    async fn find_row(
        &self,
        kind: &str,
        id: impl std::fmt::Display,
        fields: &[&str],
    ) -> Result<Option<(usize, Vec<Value>)>> {
        for shard in 0..self.shard_count() {
            let v = self.hmget(self.key(shard, kind, &id), fields).await?;
            if exists(&v) {
                return Ok(Some((shard, v)));
            }
        }
        Ok(None)
    }

    async fn hmget(&self, key: String, fields: &[&str]) -> Result<Vec<Value>> {
        let mut conn = self.inner.conn.clone();
        let v: Value = redis::cmd("HMGET")
            .arg(key)
            .arg(fields)
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        items(v)
    }
}

/// The score bounds of a newest-first page: `(max, min, cursor)` where the cursor is
/// passed on only when items at its exact time must be cut by id.
fn bounds(filter: &DeliveryFilter, cursor: Option<Cursor>) -> (String, String, Option<Cursor>) {
    let min = filter
        .since
        .map_or_else(|| "-inf".to_owned(), |s| s.as_unix_millis().to_string());
    let exclusive = |t: Timestamp| format!("({}", t.as_unix_millis());
    let (max, cursor) = match (cursor, filter.until) {
        (Some(c), Some(u)) if u <= c.created_at => (exclusive(u), None),
        (Some(c), _) => (c.created_at.as_unix_millis().to_string(), Some(c)),
        (None, Some(u)) => (exclusive(u), None),
        (None, None) => ("+inf".to_owned(), None),
    };
    (max, min, cursor)
}

#[async_trait]
impl Ledger for RedisStore {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        page.validate()?;
        filter.validate()?;
        let (max, min, cursor) = bounds(filter, page.cursor);
        let limit = page.limit as usize;
        let mut a = Args::new();
        a.s(tenant.as_str()).s(max).s(min);
        match cursor {
            Some(c) => a.t(c.created_at).s(c.id.to_string()),
            None => a.s("").s(""),
        };
        a.n(page.limit + 1)
            .opt(filter.status.map(|s| s.as_str()))
            .opt(filter.endpoint.map(|e| e.to_string()))
            .opt(filter.consumer.as_ref())
            .opt(filter.kind.map(|k| k.as_str()))
            .opt(filter.topic.as_ref())
            .opt(filter.ordering_key.as_ref())
            .opt(filter.text.as_ref().map(|t| t.to_ascii_lowercase()));
        let mut out = Vec::new();
        for reply in self.run_all::<Value>(&self.inner.scripts.list, &a).await? {
            for v in items(reply)? {
                out.push(delivery(&items(v)?)?);
            }
        }
        // Each shard's page is newest first; so is their merge.
        out.sort_by_key(|d| std::cmp::Reverse((d.created_at, d.id)));
        let next = if out.len() > limit {
            out.truncate(limit);
            out.last().map(Cursor::after)
        } else {
            None
        };
        Ok(Page { items: out, next })
    }

    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        let Some((_, v)) = self.find_row("d", id, &DELIVERY_FIELDS).await? else {
            return Err(Error::not_found("delivery"));
        };
        let d = delivery(&v)?;
        if &d.tenant != tenant {
            return Err(Error::not_found("delivery"));
        }
        Ok(d)
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        let Some((_, mut v)) = self.find_row("m", id, &MESSAGE_FIELDS).await? else {
            return Err(Error::not_found("message"));
        };
        let payload = std::mem::replace(&mut v[0], redis::Value::Nil);
        let m = message(payload, &v[1])?;
        if &m.tenant != tenant {
            return Err(Error::not_found("message"));
        }
        Ok(m)
    }

    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
        let Some((shard, _)) = self.find_row("d", delivery, &["s"]).await? else {
            return Err(Error::not_found("delivery"));
        };
        let mut conn = self.inner.conn.clone();
        let (row, list): (Vec<Value>, Vec<Value>) = redis::pipe()
            .atomic()
            .hmget(self.key(shard, "d", delivery), &["s", "tr"])
            .lrange(self.key(shard, "a", delivery), 0, -1)
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        let s = row.first().and_then(text).unwrap_or_default();
        let mut parts = s.split(crate::rows::SEP);
        let (mid, owner) = (parts.nth(1), parts.next());
        if owner != Some(tenant.as_str()) {
            return Err(Error::not_found("delivery"));
        }
        // The message's payload is immutable: every attempt carried these bytes.
        let payload: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(self.key(shard, "m", mid.unwrap_or_default()))
            .arg("p")
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        let payload = PayloadFingerprint::of(&payload.unwrap_or_default());
        // Entries dropped by the cap come first in the numbering.
        let dropped = row.get(1).and_then(int).unwrap_or(0);
        let first = u32::try_from(dropped).map_err(|_| corrupt("attempt"))?;
        list.iter()
            .enumerate()
            .map(|(i, v)| {
                let n = u32::try_from(i).map_err(|_| corrupt("attempt"))?;
                attempt(delivery, first + n + 1, v, &payload)
            })
            .collect()
    }

    async fn purge_expired(&self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        let mut a = Args::new();
        a.t(cutoffs.default).n(limit).s("");
        for (t, c) in &cutoffs.tenants {
            a.s(t.as_str()).t(*c);
        }
        self.purge(&a).await
    }

    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        let mut a = Args::new();
        a.t(before).n(limit).s(tenant.as_str());
        self.purge(&a).await
    }

    async fn tenants(&self) -> Result<Vec<TenantStats>> {
        crate::tenancy::tenants(self).await
    }
}

impl RedisStore {
    /// One retention step on each shard in turn (each rotates over its own tenants) while
    /// the limit lasts, the counts summed; the tenant named is the first one named.
    async fn purge(&self, a: &Args) -> Result<PurgeReport> {
        let mut a = Args(a.0.clone());
        let limit: u64 = std::str::from_utf8(&a.0[1])
            .ok()
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| corrupt("limit"))?;
        let mut report = PurgeReport::default();
        let rotating = a.0[2].is_empty();
        let cursor_key = format!("{}:purge", self.inner.shards[0]);
        if rotating && self.shard_count() > 1 {
            // One rotation over the tenants of every shard: the cursor lives in shard 0,
            // each shard names its next tenant with work after it, the first in turn wins.
            let mut conn = self.inner.conn.clone();
            let cursor: Option<String> = redis::cmd("GET")
                .arg(&cursor_key)
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            let cursor = cursor.unwrap_or_default();
            a.0[2] = format!(">{cursor}").into_bytes();
            let mut next: Option<String> = None;
            for reply in self.run_all::<Value>(&self.inner.scripts.purge, &a).await? {
                let Some(t) = items(reply)?.first().and_then(text) else {
                    continue;
                };
                // Tenants after the cursor come first, then the wrapped ones, each by name.
                let key = |t: &str| (cursor.is_empty() || t <= cursor.as_str(), t.to_owned());
                if next.as_deref().is_none_or(|n| key(&t) < key(n)) {
                    next = Some(t);
                }
            }
            let Some(tenant) = next else {
                return Ok(report);
            };
            let _: () = redis::cmd("SET")
                .arg(&cursor_key)
                .arg(&tenant)
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            a.0[2] = tenant.into_bytes();
        }
        for shard in 0..self.shard_count() {
            let left = limit.saturating_sub(report.deliveries);
            if left == 0 {
                break;
            }
            a.0[1] = left.to_string().into_bytes();
            let reply: Value = self.run_on(shard, &self.inner.scripts.purge, &a).await?;
            let v = items(reply)?;
            let [tenant, nd, nm] = v.as_slice() else {
                return Err(corrupt("reply"));
            };
            let n = |v: &Value| {
                int(v)
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(|| corrupt("reply"))
            };
            report.deliveries += n(nd)?;
            report.messages += n(nm)?;
            if report.tenant.is_none() {
                report.tenant = text(tenant)
                    .map(|t| TenantId::new(t).map_err(|_| corrupt("reply")))
                    .transpose()?;
            }
        }
        Ok(report)
    }
}
