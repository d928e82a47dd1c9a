//! In-process handlers: the [`Handler`] trait, what it returns, the context it
//! gets, and its options (retry policy, timeout, concurrency, dedup).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use outboxkit_core::error::{Error, Result};
use outboxkit_core::ids::{ConsumerName, DeliveryId, TenantId, Topic, TopicFilter};
use outboxkit_core::model::{Cause, Message, NewMessage};
use outboxkit_core::retry::RetryPolicy;
use outboxkit_core::store::{DynStore, Enqueued};

/// What a handler decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerResult {
    /// Done.
    Ok,
    /// Failed; retry after the policy's delay. The text goes to the ledger (keep it free of
    /// personal data).
    Retry(String),
    /// The downstream is out and the message is fine: try again after `delay` without
    /// spending an attempt, and pause this handler for that long (the circuit breaker).
    Snooze {
        /// How long.
        delay: Duration,
        /// Why (for the ledger).
        reason: String,
    },
    /// Permanent failure: dead at once.
    Discard(String),
}

impl HandlerResult {
    /// `Retry` with a reason.
    pub fn retry(reason: impl fmt::Display) -> Self {
        HandlerResult::Retry(reason.to_string())
    }

    /// `Snooze` for `delay`.
    pub fn snooze(delay: Duration, reason: impl fmt::Display) -> Self {
        HandlerResult::Snooze {
            delay,
            reason: reason.to_string(),
        }
    }

    /// `Discard` with a reason.
    pub fn discard(reason: impl fmt::Display) -> Self {
        HandlerResult::Discard(reason.to_string())
    }
}

impl<E: fmt::Display> From<std::result::Result<(), E>> for HandlerResult {
    fn from(r: std::result::Result<(), E>) -> Self {
        match r {
            Ok(()) => HandlerResult::Ok,
            Err(e) => HandlerResult::retry(e),
        }
    }
}

/// An in-process consumer's code.
///
/// A closure `|ctx, msg| async move { … }` is a handler. To implement the trait on a type of
/// your own, put `#[outboxkit_core::async_trait]` on the impl (the trait is object-safe, so a
/// native `async fn` in the impl does not match it and fails with E0195):
///
/// ```
/// use outboxkit_core::{async_trait, Message};
/// use outboxkit_dispatch::{Context, Handler, HandlerResult};
///
/// #[derive(Debug)]
/// struct SendReceipt;
///
/// #[async_trait]
/// impl Handler for SendReceipt {
///     async fn handle(&self, _ctx: Context, message: Message) -> HandlerResult {
///         println!("receipt for {}", message.topic);
///         HandlerResult::Ok
///     }
/// }
/// ```
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handle one message.
    async fn handle(&self, ctx: Context, message: Message) -> HandlerResult;
}

#[async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(Context, Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    async fn handle(&self, ctx: Context, message: Message) -> HandlerResult {
        (self)(ctx, message).await
    }
}

/// What a handler knows about the delivery it runs, and how it emits follow-ups.
#[derive(Clone)]
pub struct Context {
    pub(crate) delivery_id: DeliveryId,
    pub(crate) consumer: ConsumerName,
    pub(crate) attempt: u32,
    pub(crate) cancel: CancellationToken,
    pub(crate) store: Arc<DynStore>,
    pub(crate) cause: Cause,
    pub(crate) max_depth: u32,
    pub(crate) tenant: TenantId,
    pub(crate) emits: Option<TopicFilter>,
    pub(crate) traceparent: Option<outboxkit_core::Traceparent>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("delivery_id", &self.delivery_id)
            .field("consumer", &self.consumer)
            .field("attempt", &self.attempt)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The delivery being handled (stable across retries: a natural deduplication key).
    pub fn delivery_id(&self) -> DeliveryId {
        self.delivery_id
    }

    /// The consumer.
    pub fn consumer(&self) -> &ConsumerName {
        &self.consumer
    }

    /// Which attempt this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The producer's W3C trace context, when the message carries one (its `traceparent`
    /// header): start the handler's span as its child to continue the producer's trace.
    pub fn traceparent(&self) -> Option<&outboxkit_core::Traceparent> {
        self.traceparent.as_ref()
    }

    /// The tenant of the message being handled (follow-ups inherit it).
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Cancelled when the handler's timeout passes, when `run`'s shutdown signal arrives,
    /// or when the delivery's lease is lost to another worker: stop work and return. After
    /// a shutdown, returning `Retry` gives the attempt back; after a lost lease, nothing
    /// the handler returns is written.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Enqueue a follow-up message now, carrying this message as its cause and, unless the
    /// follow-up names one, this message's tenant.
    ///
    /// A chain deeper than the dispatcher's `max_depth` is refused with `InvalidInput`
    /// (field `cause`); a topic outside the handler's declared [`HandlerOptions::emits`] is
    /// refused with `InvalidInput` (field `topic`). Nothing is written then.
    /// Follow-ups are at least once too: give them an idempotency key derived from
    /// [`Context::delivery_id`] when a retry must not emit twice.
    pub async fn emit(&self, message: NewMessage) -> Result<Enqueued> {
        if self.cause.depth > self.max_depth {
            return Err(Error::invalid_input(
                "cause",
                format!(
                    "the chain of follow-up messages would be deeper than {}",
                    self.max_depth
                ),
            ));
        }
        if let Some(emits) = &self.emits {
            let topic = Topic::new(message.topic_str())?;
            if !emits.matches(&topic) {
                return Err(Error::invalid_input(
                    "topic",
                    format!(
                        "consumer {} does not declare {topic} among the topics it emits",
                        self.consumer
                    ),
                ));
            }
        }
        self.store
            .enqueue(
                message
                    .inherit_tenant(&self.tenant)
                    .caused_by(self.cause.clone()),
            )
            .await
    }
}

/// A function from a message to its deduplication key.
pub type DedupKeyFn = Arc<dyn Fn(&Message) -> Option<String> + Send + Sync>;

/// Skip a message whose key is taken: reserved by another delivery from its first attempt
/// until its final outcome (held across its retries), or succeeded within `ttl`.
///
/// - A delivery whose key another delivery holds is released without spending an attempt,
///   due when the holder's next attempt is (or after one poll interval while it runs).
/// - A success remembers the key for `ttl` (default [`Dedup::DEFAULT_TTL`], 60 s); later
///   deliveries with it complete as succeeded without calling the handler ("skipped").
/// - A final failure (dead) frees the key at once.
/// - A retry keeps the key reserved until the retry is due plus the lease (so a delivery
///   that never comes back — replayed elsewhere, dead at claim — frees it by itself).
/// - A delivery aborted at shutdown keeps its key for one lease, then it frees itself.
/// - At most `capacity` succeeded keys are remembered (default [`Dedup::DEFAULT_CAPACITY`],
///   10 000; the oldest goes first). The cache lives in the dispatcher's memory.
#[derive(Clone)]
pub struct Dedup {
    pub(crate) key: DedupKeyFn,
    pub(crate) ttl: Duration,
    pub(crate) capacity: usize,
}

impl Dedup {
    /// How long a succeeded key is remembered by default: 60 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
    /// How many succeeded keys are remembered by default: 10 000.
    pub const DEFAULT_CAPACITY: usize = 10_000;

    /// Deduplicate by `key`, remembering successes for `ttl`, at most `capacity` keys.
    pub fn new(
        key: impl Fn(&Message) -> Option<String> + Send + Sync + 'static,
        ttl: Duration,
        capacity: usize,
    ) -> Self {
        Dedup {
            key: Arc::new(key),
            ttl,
            capacity: capacity.max(1),
        }
    }

    /// Deduplicate by `key` with the default TTL and capacity.
    pub fn by(key: impl Fn(&Message) -> Option<String> + Send + Sync + 'static) -> Self {
        Self::new(key, Self::DEFAULT_TTL, Self::DEFAULT_CAPACITY)
    }
}

impl fmt::Debug for Dedup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dedup")
            .field("ttl", &self.ttl)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// How one handler runs.
#[derive(Clone, Debug)]
pub struct HandlerOptions {
    /// Its retry policy. Default: exponential from 1 m, factor 2, cap 1 h, 8 attempts.
    pub retry: RetryPolicy,
    /// How long one call may take before it is cancelled and retried. Default 30 s.
    pub timeout: Duration,
    /// Calls at once; `None` uses the dispatcher's `handler_concurrency`.
    pub concurrency: Option<usize>,
    /// Optional deduplication.
    pub dedup: Option<Dedup>,
    /// The topics this handler may emit through [`Context::emit`]; `None` (the default)
    /// allows any. Others are refused with `InvalidInput`.
    pub emits: Option<TopicFilter>,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        HandlerOptions {
            retry: RetryPolicy::handler_default(),
            timeout: Duration::from_secs(30),
            concurrency: None,
            dedup: None,
            emits: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_from_std_results() {
        assert_eq!(HandlerResult::from(Ok::<(), String>(())), HandlerResult::Ok);
        assert_eq!(
            HandlerResult::from(Err::<(), _>("boom")),
            HandlerResult::Retry("boom".into())
        );
    }
}
