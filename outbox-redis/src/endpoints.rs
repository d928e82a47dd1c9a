//! [`EndpointStore`] for [`RedisStore`]: endpoints (a hash each, indexed per tenant by
//! creation) and consumers (one hash of `name → created_at|filter`).

use async_trait::async_trait;
use outboxkit_core::endpoint::check_description;
use outboxkit_core::{
    Consumer, ConsumerName, ConsumerStatus, Endpoint, EndpointId, EndpointStore, EndpointUpdate,
    Error, ErrorKind, Result, TenantId,
};
use redis::Value;

use crate::error::redis_err;
use crate::rows::{
    consumer, consumer_value, endpoint, endpoint_fields, int, items, text, Args, ENDPOINT_OPTIONAL,
};
use crate::store::RedisStore;

/// How often an update retries when another writer changed the endpoint in between.
const UPDATE_TRIES: usize = 32;

impl RedisStore {
    fn consumers_key(&self, shard: usize) -> String {
        format!("{}:consumers", self.inner.shards[shard])
    }

    /// The set of paused consumers' names (each shard has a copy, like the consumers).
    fn paused_key(&self, shard: usize) -> String {
        format!("{}:consumers:paused", self.inner.shards[shard])
    }

    /// Run an endpoint write on shard 0 (which decides its answer), then on every other
    /// shard: each shard keeps a copy of every endpoint, since an enqueue fans out inside
    /// its own shard. A copy a shard lacks is not an error there.
    async fn endpoint_everywhere<T: redis::FromRedisValue>(&self, a: &Args) -> Result<T> {
        let first: T = self.run_on(0, &self.inner.scripts.endpoint, a).await?;
        for shard in 1..self.shard_count() {
            match self
                .run_on::<Value>(shard, &self.inner.scripts.endpoint, a)
                .await
            {
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict) => {}
                r => drop(r?),
            }
        }
        Ok(first)
    }

    async fn read_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<(Endpoint, String)> {
        let mut conn = self.inner.conn.clone();
        let v: Value = redis::cmd("HGETALL")
            .arg(self.key(0, "e", id))
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        let v = match v {
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => items(other)?,
        };
        if v.is_empty() {
            return Err(Error::not_found("endpoint"));
        }
        let (e, ver) = endpoint(&v)?;
        if &e.tenant != tenant {
            return Err(Error::not_found("endpoint"));
        }
        Ok((e, ver))
    }
}

#[async_trait]
impl EndpointStore for RedisStore {
    async fn create_endpoint(&self, e: &Endpoint) -> Result<()> {
        check_description(&e.description)?;
        outboxkit_core::endpoint::check_rate_limit(e.rate_limit)?;
        outboxkit_core::endpoint::check_headers(&e.headers)?;
        let mut a = Args::new();
        a.s("create")
            .s(e.id.to_string())
            .s(e.tenant.as_str())
            .t(e.created_at);
        for (k, v) in endpoint_fields(e) {
            a.s(k).b(v);
        }
        let _: i64 = self.endpoint_everywhere(&a).await?;
        Ok(())
    }

    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint> {
        Ok(self.read_endpoint(tenant, id).await?.0)
    }

    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>> {
        let mut a = Args::new();
        a.s("list").s(tenant.as_str());
        let reply: Value = self.run(&self.inner.scripts.endpoint, &a).await?;
        items(reply)?
            .into_iter()
            .map(|v| Ok(endpoint(&items(v)?)?.0))
            .collect()
    }

    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> Result<Endpoint> {
        update.validate()?;
        for _ in 0..UPDATE_TRIES {
            let (mut e, ver) = self.read_endpoint(tenant, id).await?;
            let now = self.now();
            update.apply(&mut e, now);
            outboxkit_core::endpoint::check_headers(&e.headers)?;
            let fields = endpoint_fields(&e);
            let mut a = Args::new();
            a.s("update")
                .s(id.to_string())
                .s(tenant.as_str())
                .s(&ver)
                .s(if update.releases_held(&e.status) {
                    "1"
                } else {
                    "0"
                })
                .t(now);
            match update.holds_until(now) {
                Some(until) => a.t(until),
                None => a.s(""),
            };
            a.n(fields.len() as i64);
            for (k, v) in &fields {
                a.s(k).b(v.clone());
            }
            for k in ENDPOINT_OPTIONAL {
                if !fields.iter().any(|(f, _)| *f == k) {
                    a.s(k);
                }
            }
            let reply: Value = self.run_on(0, &self.inner.scripts.endpoint, &a).await?;
            let v = items(reply)?;
            if v.first().and_then(int) == Some(1) {
                // Shard 0 took the change: the other shards' copies follow it without the
                // version check (the empty version).
                a.0[3] = Vec::new();
                let mut released = v.get(1).and_then(int).unwrap_or(0);
                for shard in 1..self.shard_count() {
                    match self
                        .run_on::<Value>(shard, &self.inner.scripts.endpoint, &a)
                        .await
                    {
                        Err(e) if e.kind() == ErrorKind::NotFound => {}
                        r => released += items(r?)?.get(1).and_then(int).unwrap_or(0),
                    }
                }
                if released > 0 {
                    self.wake_local();
                }
                return Ok(e);
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            "the endpoint kept changing during the update; try again",
        ))
    }

    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()> {
        let mut a = Args::new();
        a.s("delete")
            .s(id.to_string())
            .s(tenant.as_str())
            .t(self.now());
        let n: i64 = self.endpoint_everywhere(&a).await?;
        if n > 1 || self.shard_count() > 1 {
            self.wake_local();
        }
        Ok(())
    }

    async fn put_consumer(&self, c: &Consumer) -> Result<()> {
        let mut conn = self.inner.conn.clone();
        for shard in 0..self.shard_count() {
            // Register the consumer's group index (`G:h:<name>`) for `stats.lua` first, so
            // its deliveries stay visible there after the consumer is deleted.
            let _: i64 = redis::cmd("SADD")
                .arg(format!("{}:qs", self.inner.shards[shard]))
                .arg(format!("{}:G:h:{}", self.inner.shards[shard], c.name))
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            let _: i64 = redis::cmd("HSET")
                .arg(self.consumers_key(shard))
                .arg(c.name.as_str())
                .arg(consumer_value(c))
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
        }
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<Consumer>> {
        let mut conn = self.inner.conn.clone();
        let v: Value = redis::cmd("HGETALL")
            .arg(self.consumers_key(0))
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        let v = match v {
            Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            other => items(other)?,
        };
        let mut out = v
            .chunks(2)
            .map(
                |p| match (p.first().and_then(text), p.get(1).and_then(text)) {
                    (Some(name), Some(value)) => consumer(&name, &value),
                    _ => Err(crate::error::corrupt("consumer")),
                },
            )
            .collect::<Result<Vec<_>>>()?;
        let paused: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.paused_key(0))
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        for c in &mut out {
            if paused.iter().any(|p| p == c.name.as_str()) {
                c.status = ConsumerStatus::Paused;
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()> {
        let mut conn = self.inner.conn.clone();
        let mut removed = 0;
        for shard in (0..self.shard_count()).rev() {
            removed = redis::cmd("HDEL")
                .arg(self.consumers_key(shard))
                .arg(name.as_str())
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            // A consumer registered again under this name starts active.
            let _: i64 = redis::cmd("SREM")
                .arg(self.paused_key(shard))
                .arg(name.as_str())
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
        }
        if removed == 0 {
            return Err(Error::not_found("consumer"));
        }
        Ok(())
    }

    async fn set_consumer_status(
        &self,
        name: &ConsumerName,
        status: ConsumerStatus,
    ) -> Result<Consumer> {
        let mut a = Args::new();
        a.s("consumer")
            .s(name.as_str())
            .s(if status == ConsumerStatus::Paused {
                "1"
            } else {
                "0"
            })
            .t(self.now());
        // Shard 0 decides (an unknown consumer is `NotFound` there, changing nothing); every
        // shard holds or releases its own deliveries of the consumer.
        let mut released: i64 = self.run_on(0, &self.inner.scripts.endpoint, &a).await?;
        for shard in 1..self.shard_count() {
            match self
                .run_on::<i64>(shard, &self.inner.scripts.endpoint, &a)
                .await
            {
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                r => released += r?,
            }
        }
        if released > 0 || self.shard_count() > 1 {
            self.wake_local();
        }
        self.list_consumers()
            .await?
            .into_iter()
            .find(|c| &c.name == name)
            .ok_or_else(|| Error::not_found("consumer"))
    }
}
