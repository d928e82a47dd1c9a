//! [`EventTypeStore`] on Redis: the catalogue on shard 0 (the designated shard, whatever
//! the shard count): `<shard 0>:event_types` (a hash of topic → the type as JSON) and
//! `<shard 0>:catalogue_mode` (absent is `off`), and the check every enqueue path makes
//! against the store's copy of them.
//!
//! `enqueue` and `enqueue_batch` read the catalogue again when the copy is older than
//! [`outboxkit_core::catalogue::CACHE_MAX_AGE`] or would refuse. `enqueue_in` only adds to
//! the caller's pipeline and reads nothing, so it checks against the copy as last read: at
//! open, after each catalogue write through this handle, by an `enqueue` after the max age,
//! or by [`RedisStore::refresh_catalogue`].

use std::sync::Arc;

use async_trait::async_trait;
use outboxkit_core::catalogue::Catalogue;
use outboxkit_core::{
    CatalogueMode, Error, ErrorKind, EventType, EventTypeStore, NewEventType, Result, Topic,
    ValidMessage,
};
use redis::Value;

use crate::error::{corrupt, redis_err};
use crate::rows::{items, text};
use crate::store::RedisStore;

fn decode(v: &str) -> Result<EventType> {
    serde_json::from_str(v).map_err(|_| corrupt("event type"))
}

impl RedisStore {
    fn types_key(&self) -> String {
        format!("{}:event_types", self.inner.shards[0])
    }

    fn mode_key(&self) -> String {
        format!("{}:catalogue_mode", self.inner.shards[0])
    }

    async fn read_mode(&self) -> Result<CatalogueMode> {
        let mut conn = self.inner.conn.clone();
        let mode: Option<String> = redis::cmd("GET")
            .arg(self.mode_key())
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        match mode {
            None => Ok(CatalogueMode::Off),
            Some(m) => m.parse().map_err(|_| corrupt("catalogue mode")),
        }
    }

    async fn read_types(&self) -> Result<Vec<EventType>> {
        let mut conn = self.inner.conn.clone();
        let v: Value = redis::cmd("HVALS")
            .arg(self.types_key())
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        let mut out = items(v)?
            .iter()
            .map(|v| {
                text(v)
                    .ok_or_else(|| corrupt("event type"))
                    .and_then(|t| decode(&t))
            })
            .collect::<Result<Vec<_>>>()?;
        out.sort_by(|a, b| a.topic.as_str().cmp(b.topic.as_str()));
        Ok(out)
    }

    /// Read the catalogue now and keep it as this handle's copy (what [`RedisStore::enqueue_in`]
    /// checks against; see the module docs).
    pub async fn refresh_catalogue(&self) -> Result<()> {
        self.read_catalogue().await.map(|_| ())
    }

    async fn read_catalogue(&self) -> Result<Arc<Catalogue>> {
        let now = self.now();
        let mode = self.read_mode().await?;
        let c = if mode == CatalogueMode::Off {
            Catalogue::off()
        } else {
            Catalogue::new(mode, self.read_types().await?)?
        };
        Ok(self.inner.catalogue.keep(c, now))
    }

    /// Check messages before the store's own write: the copy while it is fresh and accepts
    /// them, otherwise a read.
    pub(crate) async fn check_catalogue(&self, valid: &[ValidMessage]) -> Result<()> {
        if self.inner.catalogue.accepts(self.now(), valid) {
            return Ok(());
        }
        self.read_catalogue().await?.check_all(valid)
    }

    /// Check messages for `enqueue_in`, which cannot read: against the copy as last read.
    pub(crate) fn check_catalogue_cached(&self, valid: &[ValidMessage]) -> Result<()> {
        match self.inner.catalogue.last() {
            Some(c) => c.check_all(valid),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl EventTypeStore for RedisStore {
    async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType> {
        event_type.validate()?;
        let existing = match self.get_event_type(&event_type.topic).await {
            Ok(e) => Some(e),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let stored = event_type
            .clone()
            .into_event_type(existing.as_ref(), self.now());
        let value = serde_json::to_string(&stored).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "an event type did not serialize").with_source(e)
        })?;
        let mut conn = self.inner.conn.clone();
        let _: i64 = redis::cmd("HSET")
            .arg(self.types_key())
            .arg(stored.topic.as_str())
            .arg(value)
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        self.read_catalogue().await?;
        Ok(stored)
    }

    async fn get_event_type(&self, topic: &Topic) -> Result<EventType> {
        let mut conn = self.inner.conn.clone();
        let v: Option<String> = redis::cmd("HGET")
            .arg(self.types_key())
            .arg(topic.as_str())
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        match v {
            Some(v) => decode(&v),
            None => Err(Error::not_found("event type")),
        }
    }

    async fn list_event_types(&self) -> Result<Vec<EventType>> {
        self.read_types().await
    }

    async fn delete_event_type(&self, topic: &Topic) -> Result<()> {
        let mut conn = self.inner.conn.clone();
        let n: i64 = redis::cmd("HDEL")
            .arg(self.types_key())
            .arg(topic.as_str())
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        self.read_catalogue().await?;
        if n == 0 {
            return Err(Error::not_found("event type"));
        }
        Ok(())
    }

    async fn catalogue_mode(&self) -> Result<CatalogueMode> {
        self.read_mode().await
    }

    async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()> {
        let mut conn = self.inner.conn.clone();
        let _: () = redis::cmd("SET")
            .arg(self.mode_key())
            .arg(mode.as_str())
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        self.read_catalogue().await?;
        Ok(())
    }
}
