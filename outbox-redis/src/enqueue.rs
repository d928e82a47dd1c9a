//! [`MessageStore`] for [`RedisStore`]: enqueue on its own, in batches, or inside the
//! caller's `MULTI` ([`RedisStore::enqueue_in`]); each is one run of `scripts/enqueue.lua`.

use async_trait::async_trait;
use outboxkit_core::{
    fanout, DeliveryId, Enqueued, Error, MessageStore, NewMessage, Result, Timestamp, ValidMessage,
};

use crate::error::corrupt;
use crate::rows::{enqueued, items, pack_message, Args};
use crate::scripts::ENQUEUE;
use crate::store::RedisStore;

impl RedisStore {
    fn enqueue_args(&self, now: Timestamp, messages: &[ValidMessage]) -> Result<Args> {
        let entropy = self.inner.entropy.as_ref();
        let mut a = Args::new();
        a.t(now)
            .n(i64::try_from(messages.len()).unwrap_or(i64::MAX));
        for valid in messages {
            let m = fanout::message_row(valid, now, entropy);
            // The script derives each delivery id from this random base (same time part).
            let base = DeliveryId::generate(now, entropy);
            let packed = pack_message(&m)?;
            let emails: Vec<&str> = valid.emails.iter().map(|r| r.as_str()).collect();
            a.s(m.id.to_string())
                .s(m.tenant.as_str())
                .s(m.topic.as_str())
                .opt(m.ordering_key.as_ref())
                .opt(m.idempotency_key.as_ref())
                .t(m.available_at)
                .s(packed)
                .b(m.payload)
                .s(base.to_string())
                .s(emails.join("\n"));
        }
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
    pub fn enqueue_in(&self, pipe: &mut redis::Pipeline, message: NewMessage) -> Result<()> {
        if !pipe.is_transaction() {
            return Err(Error::invalid_input(
                "pipeline",
                "must be atomic: call `.atomic()` on it first",
            ));
        }
        let now = self.now();
        let valid = message.validate(&self.inner.config.limits, now)?;
        let args = self.enqueue_args(now, std::slice::from_ref(&valid))?;
        pipe.cmd("EVAL")
            .arg(ENQUEUE)
            .arg(1)
            .arg(self.inner.config.prefix.as_str());
        for a in &args.0 {
            pipe.arg(a.as_slice());
        }
        Ok(())
    }

    async fn write(&self, now: Timestamp, valid: &[ValidMessage]) -> Result<Vec<Enqueued>> {
        let args = self.enqueue_args(now, valid)?;
        let reply: redis::Value = self.run(&self.inner.scripts.enqueue, &args).await?;
        let out = items(reply)?
            .iter()
            .map(|v| enqueued(v).ok_or_else(|| corrupt("reply")))
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
        self.write(now, &valid).await
    }
}
