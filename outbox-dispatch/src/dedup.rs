//! Handler dedup keys (seed 004): which delivery holds a key, until when, and what a
//! verdict does to it. The public side is [`super::Dedup`].

use foldhash::HashMap;
use std::collections::VecDeque;
use std::time::Duration;

use super::{Registered, Shared};
use outboxkit_core::ids::DeliveryId;
use outboxkit_core::model::Message;
use outboxkit_core::time::Timestamp;
use outboxkit_core::verdict::Verdict;

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

pub(crate) enum Reserve<'a> {
    /// Run it (holding the key, if any).
    Go(Option<KeyGuard<'a>>),
    /// Another delivery holds the key: release for this long.
    Taken(Duration),
    /// The key succeeded recently.
    Skip,
}

/// Reserve the message's dedup key for this delivery, if the handler deduplicates.
pub(crate) fn reserve_key<'a>(
    shared: &Shared,
    reg: &'a Registered,
    message: &Message,
    delivery: DeliveryId,
    now: Timestamp,
) -> Reserve<'a> {
    let Some(dedup) = &reg.options.dedup else {
        return Reserve::Go(None);
    };
    let Some(key) = (dedup.key)(message) else {
        return Reserve::Go(None);
    };
    let seen = reg
        .dedup
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .check(&key, delivery, now);
    match seen {
        Seen::New => Reserve::Go(Some(KeyGuard::new(
            &reg.dedup,
            key,
            delivery,
            now.saturating_add(shared.config.lease),
            dedup.capacity,
        ))),
        Seen::Taken(None) => Reserve::Taken(shared.config.poll_interval),
        Seen::Taken(Some(until)) => {
            Reserve::Taken(until.duration_since(now).max(shared.config.poll_interval))
        }
        Seen::Done => Reserve::Skip,
    }
}

/// What a verdict means for the delivery's dedup key: a success is remembered for `ttl`, a
/// dead end frees it, anything else keeps it until the next attempt is due plus a lease.
pub(crate) fn key_outcome(
    verdict: &Verdict,
    now: Timestamp,
    ttl: Duration,
    lease: Duration,
) -> KeyOutcome {
    match verdict {
        Verdict::Succeeded => KeyOutcome::Succeeded(now.saturating_add(ttl)),
        Verdict::Dead { .. } => KeyOutcome::Dead,
        again => match again.due() {
            Some(due) => KeyOutcome::Again {
                due,
                until: due.saturating_add(lease),
            },
            None => KeyOutcome::Dead,
        },
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
}
