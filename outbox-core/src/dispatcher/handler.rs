//! In-process handlers (DESIGN §8.1): the [`Handler`] trait, what it returns, the context it
//! gets, and its options (retry policy, timeout, concurrency, dedup).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::ids::{ConsumerName, DeliveryId, TenantId, Topic, TopicFilter};
use crate::model::{Cause, Message, NewMessage};
use crate::retry::RetryPolicy;
use crate::store::{DynStore, Enqueued};
use crate::time::Timestamp;

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

    /// The tenant of the message being handled (follow-ups inherit it).
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// Cancelled when the handler's timeout passes or the dispatcher stops: stop work and
    /// return.
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

/// Whether a dedup key was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Free: now reserved for this delivery.
    New,
    /// Another delivery holds it: try again at this time (`None`: while it runs).
    Taken(Option<Timestamp>),
    /// Succeeded recently.
    Done,
}

/// Who holds a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// This delivery runs now.
    Running(DeliveryId),
    /// This delivery will try again at `due`; the key frees itself at `until`.
    Held {
        owner: DeliveryId,
        due: Timestamp,
        until: Timestamp,
    },
}

impl Mark {
    fn owner(self) -> DeliveryId {
        match self {
            Mark::Running(o) | Mark::Held { owner: o, .. } => o,
        }
    }
}

/// How an attempt ended, for the dedup key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyOutcome {
    /// Succeeded: remember the key until this time.
    Succeeded(Timestamp),
    /// Dead: free the key.
    Dead,
    /// It will run again at `due`: keep the key until `until`.
    Again {
        /// When it is due.
        due: Timestamp,
        /// When the key frees itself if it has not come back.
        until: Timestamp,
    },
}

/// A bounded cache of dedup keys: reserved keys and recent successes.
#[derive(Debug, Default)]
pub(crate) struct DedupCache {
    marks: HashMap<String, Mark>,
    done: HashMap<String, Timestamp>,
    order: VecDeque<String>,
    /// How many marks were left after the last sweep of expired reservations.
    swept: usize,
}

impl DedupCache {
    pub(crate) fn check(&mut self, key: &str, delivery: DeliveryId, now: Timestamp) -> Seen {
        if self.marks.len() >= 2 * self.swept.max(64) {
            // Reservations of deliveries that never came back (amortised: the map doubles
            // between sweeps).
            self.marks
                .retain(|_, m| !matches!(m, Mark::Held { until, .. } if *until <= now));
            self.swept = self.marks.len();
        }
        match self.marks.get(key).copied() {
            Some(Mark::Running(o)) if o != delivery => return Seen::Taken(None),
            Some(Mark::Held { owner, due, until }) if owner != delivery && until > now => {
                return Seen::Taken(Some(due))
            }
            _ => {}
        }
        if self.done.get(key).is_some_and(|until| *until > now) {
            self.marks.remove(key);
            return Seen::Done;
        }
        self.marks.insert(key.to_owned(), Mark::Running(delivery));
        Seen::New
    }

    /// Record how `delivery`'s attempt ended (ignored when the key has another owner).
    pub(crate) fn finish(
        &mut self,
        key: &str,
        delivery: DeliveryId,
        outcome: KeyOutcome,
        capacity: usize,
    ) {
        if self.marks.get(key).map(|m| m.owner()) != Some(delivery) {
            return;
        }
        match outcome {
            KeyOutcome::Again { due, until } => {
                self.marks.insert(
                    key.to_owned(),
                    Mark::Held {
                        owner: delivery,
                        due,
                        until,
                    },
                );
                return;
            }
            KeyOutcome::Dead => {
                self.marks.remove(key);
                return;
            }
            KeyOutcome::Succeeded(expires) => {
                self.marks.remove(key);
                if self.done.insert(key.to_owned(), expires).is_none() {
                    self.order.push_back(key.to_owned());
                }
            }
        }
        while self.done.len() > capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.done.remove(&old);
                }
                None => break,
            }
        }
    }
}

/// A key reserved for one running delivery. Dropped without [`KeyGuard::finish`] (the task
/// was aborted at shutdown), the key is held until `abandoned_until`, then frees itself.
pub(crate) struct KeyGuard<'a> {
    cache: &'a std::sync::Mutex<DedupCache>,
    key: String,
    delivery: DeliveryId,
    abandoned_until: Timestamp,
    capacity: usize,
    finished: bool,
}

impl<'a> KeyGuard<'a> {
    pub(crate) fn new(
        cache: &'a std::sync::Mutex<DedupCache>,
        key: String,
        delivery: DeliveryId,
        abandoned_until: Timestamp,
        capacity: usize,
    ) -> Self {
        KeyGuard {
            cache,
            key,
            delivery,
            abandoned_until,
            capacity,
            finished: false,
        }
    }

    pub(crate) fn finish(mut self, outcome: KeyOutcome) {
        self.finished = true;
        self.record(outcome);
    }

    fn record(&self, outcome: KeyOutcome) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).finish(
            &self.key,
            self.delivery,
            outcome,
            self.capacity,
        );
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.record(KeyOutcome::Again {
                due: self.abandoned_until,
                until: self.abandoned_until,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> Timestamp {
        Timestamp::EPOCH.saturating_add(Duration::from_secs(s))
    }

    fn id(n: u8) -> DeliveryId {
        DeliveryId::parse(&format!("01900000-0000-7000-8000-0000000000{n:02x}")).unwrap()
    }

    #[test]
    fn dedup_cache_skips_taken_keys_and_recent_successes() {
        let mut c = DedupCache::default();
        let (a, b) = (id(1), id(2));
        assert_eq!(c.check("k", a, t(0)), Seen::New);
        assert_eq!(c.check("k", b, t(0)), Seen::Taken(None));
        c.finish("k", a, KeyOutcome::Succeeded(t(10)), 100);
        assert_eq!(c.check("k", b, t(5)), Seen::Done);
        assert_eq!(c.check("k", b, t(10)), Seen::New, "expired after the ttl");
        c.finish("k", b, KeyOutcome::Dead, 100);
        assert_eq!(
            c.check("k", a, t(11)),
            Seen::New,
            "a dead end frees the key"
        );
    }

    #[test]
    fn a_key_is_held_across_retries_until_the_final_outcome() {
        let mut c = DedupCache::default();
        let (a, b) = (id(1), id(2));
        assert_eq!(c.check("k", a, t(0)), Seen::New);
        let again = |due, until| KeyOutcome::Again {
            due: t(due),
            until: t(until),
        };
        c.finish("k", a, again(20, 60), 100);
        assert_eq!(c.check("k", b, t(1)), Seen::Taken(Some(t(20))));
        assert_eq!(c.check("k", b, t(30)), Seen::Taken(Some(t(20))));
        assert_eq!(c.check("k", a, t(60)), Seen::New, "the holder's retry runs");
        c.finish("k", a, again(80, 120), 100);
        assert_eq!(c.check("k", b, t(119)), Seen::Taken(Some(t(80))));
        assert_eq!(
            c.check("k", b, t(120)),
            Seen::New,
            "a holder that never came back frees the key"
        );
        c.finish("k", a, KeyOutcome::Succeeded(t(500)), 100);
        assert_eq!(
            c.check("k", a, t(121)),
            Seen::Taken(None),
            "a stale owner changes nothing"
        );
    }

    #[test]
    fn an_abandoned_key_frees_itself() {
        let cache = std::sync::Mutex::new(DedupCache::default());
        let (a, b) = (id(1), id(2));
        assert_eq!(cache.lock().unwrap().check("k", a, t(0)), Seen::New);
        drop(KeyGuard::new(&cache, "k".into(), a, t(40), 100));
        let mut c = cache.lock().unwrap();
        assert_eq!(c.check("k", b, t(1)), Seen::Taken(Some(t(40))));
        assert_eq!(c.check("k", a, t(1)), Seen::New, "its own retry runs");
        c.finish("k", a, KeyOutcome::Dead, 100);
        assert_eq!(c.check("k", b, t(2)), Seen::New);
    }

    #[test]
    fn dedup_cache_is_bounded() {
        let mut c = DedupCache::default();
        for i in 0..10 {
            let k = format!("k{i}");
            assert_eq!(c.check(&k, id(i), t(0)), Seen::New);
            c.finish(&k, id(i), KeyOutcome::Succeeded(t(100)), 3);
        }
        assert_eq!(c.done.len(), 3);
        assert_eq!(
            c.check("k0", id(0), t(1)),
            Seen::New,
            "the oldest keys were evicted"
        );
        assert_eq!(c.check("k9", id(9), t(1)), Seen::Done);
    }

    #[test]
    fn results_from_std_results() {
        assert_eq!(HandlerResult::from(Ok::<(), String>(())), HandlerResult::Ok);
        assert_eq!(
            HandlerResult::from(Err::<(), _>("boom")),
            HandlerResult::Retry("boom".into())
        );
    }
}
