//! [`MessageStore`] for [`RedisStore`]: enqueue on its own, in batches, or inside the
//! caller's `MULTI` ([`RedisStore::enqueue_in`]); each is one run of `scripts/enqueue.lua`.

use async_trait::async_trait;
use outboxkit_core::{
    fanout, DeliveryId, Enqueued, Error, Message, MessageStore, NewMessage, Result, Timestamp,
    ValidMessage,
};

use crate::error::corrupt;
use crate::rows::{enqueued, items, pack_message, Args};
use crate::scripts::enqueue_source;
use crate::store::RedisStore;

/// Sequence numbers reserved per message when the outbox has several shards (the most
/// destinations one message may fan out to there); `scripts/enqueue.lua` agrees.
const SEQ_BLOCK: i64 = 4096;

/// One message ready to be written.
struct Row {
    message: Message,
    base: DeliveryId,
    emails: String,
}

/// FNV-1a (64 bits) over the parts, each followed by a unit separator: stable across
/// processes and versions, which the shard choice must be.
fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0x1f]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The hash tag of a shard prefix, braces included (`app:{outbox:2}:` → `{outbox:2}`).
pub(crate) fn hash_tag(prefix: &str) -> &str {
    let open = prefix.find('{').unwrap_or(0);
    let close = prefix[open..]
        .find('}')
        .map_or(prefix.len(), |c| open + c + 1);
    &prefix[open..close]
}

impl RedisStore {
    /// The rows of `messages` (ids drawn here) with the shard each goes to.
    fn rows(&self, now: Timestamp, messages: &[ValidMessage]) -> Vec<(usize, Row)> {
        let entropy = self.inner.entropy.as_ref();
        messages
            .iter()
            .map(|valid| {
                let m = fanout::message_row(valid, now, entropy);
                // The script derives each delivery id from this random base (same time part).
                let base = DeliveryId::generate(now, entropy);
                let emails: Vec<&str> = valid.emails.iter().map(|r| r.as_str()).collect();
                let row = Row {
                    emails: emails.join("\n"),
                    base,
                    message: m,
                };
                (self.shard_of(&row.message), row)
            })
            .collect()
    }

    /// A message's shard: from its tenant and ordering key, so one key's deliveries share
    /// a slot and its FIFO barrier; without one from its tenant alone, so a duplicate
    /// (same tenant, topic and idempotency key) meets the original and each of the tenant's
    /// groups (tenant, destination) sits in one shard, where a claim can be fair to it.
    pub(crate) fn shard_of(&self, m: &Message) -> usize {
        let n = self.shard_count();
        if n == 1 {
            return 0;
        }
        let h = match &m.ordering_key {
            Some(k) => fnv(&[m.tenant.as_str(), k.as_str()]),
            None => fnv(&[m.tenant.as_str()]),
        };
        usize::try_from(h % n as u64).unwrap_or(0)
    }

    fn enqueue_args<'a>(
        &self,
        now: Timestamp,
        seq_bases: &[i64],
        rows: impl Iterator<Item = &'a Row>,
    ) -> Result<Args> {
        let mut a = Args::new();
        let mut count = 0i64;
        let bases: Vec<String> = seq_bases.iter().map(i64::to_string).collect();
        a.t(now).n(0).s(bases.join(","));
        for row in rows {
            let m = &row.message;
            count += 1;
            a.s(m.id.to_string())
                .s(m.tenant.as_str())
                .s(m.topic.as_str())
                .opt(m.ordering_key.as_ref())
                .opt(m.idempotency_key.as_ref())
                .t(m.available_at)
                .s(pack_message(m)?)
                .b(m.payload.clone())
                .s(row.base.to_string())
                .s(&row.emails);
        }
        a.0[1] = count.to_string().into_bytes();
        Ok(a)
    }

    /// Add the enqueue of `message` to `pipe`, a `MULTI` pipeline you execute yourself
    /// together with your own writes: the message and its fan-out are written if and only
    /// if the transaction runs.
    ///
    /// The pipeline MUST be atomic (`redis::pipe().atomic()`); anything else is refused
    /// with `InvalidInput`. Validation happens here, so an invalid message adds nothing.
    /// The fan-out (consumers, the tenant's endpoints) and the idempotency check happen
    /// inside the script at `EXEC`, so a duplicate key still writes nothing. The command is
    /// an `EVAL` of the script's text, not an `EVALSHA`: inside `MULTI` a `NOSCRIPT` error
    /// could not be retried, and `EXEC` would apply your writes without the message.
    ///
    /// The command's reply decodes into [`crate::EnqueueReply`]; do not `.ignore()` it if
    /// you want to know whether the message was a duplicate.
    ///
    /// Returns the hash tag of the slot the message goes to (the prefix's with one shard).
    /// On a Redis Cluster a `MULTI` runs in one slot: every key of yours in `pipe` must carry
    /// this tag, and several messages in one `pipe` must share a shard (same tenant and
    /// ordering key); see the crate docs on shards.
    ///
    /// ```no_run
    /// # async fn f(store: outboxkit_redis::RedisStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use outboxkit_core::NewMessage;
    /// use outboxkit_redis::EnqueueReply;
    ///
    /// let mut pipe = redis::pipe();
    /// pipe.atomic().set("order:42", "paid").ignore();
    /// store.enqueue_in(&mut pipe, NewMessage::new("order.paid", serde_json::json!({"id": 42})))?;
    /// let (reply,): (EnqueueReply,) = pipe.query_async(&mut store.connection()).await?;
    /// println!("message {}", reply.0.message_id);
    /// # Ok(()) }
    /// ```
    pub fn enqueue_in(&self, pipe: &mut redis::Pipeline, message: NewMessage) -> Result<String> {
        if !pipe.is_transaction() {
            return Err(Error::invalid_input(
                "pipeline",
                "must be atomic: call `.atomic()` on it first",
            ));
        }
        let now = self.now();
        let valid = message.validate(&self.inner.config.limits, now)?;
        self.check_catalogue_cached(std::slice::from_ref(&valid))?;
        let rows = self.rows(now, std::slice::from_ref(&valid));
        let shard = rows.first().map_or(0, |r| r.0);
        let args = self.enqueue_args(now, &[], rows.iter().map(|r| &r.1))?;
        let prefix = &self.inner.shards[shard];
        pipe.cmd("EVAL")
            .arg(enqueue_source())
            .arg(1)
            .arg(prefix.as_str());
        for a in &args.0 {
            pipe.arg(a.as_slice());
        }
        Ok(hash_tag(prefix).to_owned())
    }

    async fn write(&self, now: Timestamp, valid: &[ValidMessage]) -> Result<Vec<Enqueued>> {
        let rows = self.rows(now, valid);
        let mut out: Vec<Option<Enqueued>> = vec![None; rows.len()];
        // With several shards the sequence numbers (the order of equal due times) come
        // from shard 0, a block per message, so that one order holds across shards.
        let mut seq_next = None;
        if self.shard_count() > 1 {
            let want = SEQ_BLOCK * i64::try_from(rows.len()).unwrap_or(i64::MAX / SEQ_BLOCK);
            let mut conn = self.inner.conn.clone();
            let end: i64 = redis::cmd("INCRBY")
                .arg(format!("{}:seq", self.inner.shards[0]))
                .arg(want)
                .query_async(&mut conn)
                .await
                .map_err(crate::error::redis_err)?;
            seq_next = Some(end - want);
        }
        // One script run per shard the batch touches, each atomic on its own.
        for shard in 0..self.shard_count() {
            let mine: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].0 == shard).collect();
            if mine.is_empty() {
                continue;
            }
            // Message i of the batch gets block i, whichever shard it goes to.
            let bases: Vec<i64> = match seq_next {
                Some(b) => mine
                    .iter()
                    .map(|&i| b + SEQ_BLOCK * i64::try_from(i).unwrap_or(0))
                    .collect(),
                None => Vec::new(),
            };
            let args = self.enqueue_args(now, &bases, mine.iter().map(|&i| &rows[i].1))?;
            let reply: redis::Value = self
                .run_on(shard, &self.inner.scripts.enqueue, &args)
                .await?;
            let got = items(reply)?;
            if got.len() != mine.len() {
                return Err(corrupt("reply"));
            }
            for (i, v) in mine.into_iter().zip(&got) {
                out[i] = Some(enqueued(v).ok_or_else(|| corrupt("reply"))?);
            }
        }
        let out = out
            .into_iter()
            .map(|e| e.ok_or_else(|| corrupt("reply")))
            .collect::<Result<Vec<_>>>()?;
        if out.iter().any(|e| e.deliveries > 0) {
            self.wake_local();
        }
        Ok(out)
    }
}

#[async_trait]
impl MessageStore for RedisStore {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        let now = self.now();
        let valid = message.validate(&self.inner.config.limits, now)?;
        self.check_catalogue(std::slice::from_ref(&valid)).await?;
        self.write(now, std::slice::from_ref(&valid))
            .await?
            .pop()
            .ok_or_else(|| corrupt("reply"))
    }

    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let valid = messages
            .into_iter()
            .map(|m| m.validate(&self.inner.config.limits, now))
            .collect::<Result<Vec<_>>>()?;
        self.check_catalogue(&valid).await?;
        self.write(now, &valid).await
    }
}
