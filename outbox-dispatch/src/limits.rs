//! Per-endpoint limits shared by every delivery task of one dispatcher: the rate limit
//! stored on the endpoint (a token bucket: this process's first gate, before the store's
//! permits of `permits.rs` hold it across processes) and an optional cap on requests in
//! flight.

use foldhash::HashMap;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use outboxkit_core::ids::EndpointId;
use outboxkit_core::time::Timestamp;

/// The window a rate limit counts in: "`n` per second".
const WINDOW: Duration = Duration::from_secs(1);

/// One endpoint's state: when its recent requests started, and how many are in flight.
#[derive(Debug, Default)]
struct Slot {
    starts: VecDeque<Timestamp>,
    running: usize,
}

/// A token bucket of `rate` tokens in which each spent token comes back one second after it
/// was spent: no half-open one-second window ever holds more than `rate` starts, and a
/// burst of up to `rate` goes out at once. Returns how long to wait for the next token, or
/// `None` when one is free now (then it is spent).
fn take_token(starts: &mut VecDeque<Timestamp>, rate: u32, now: Timestamp) -> Option<Duration> {
    while starts
        .front()
        .is_some_and(|t| t.saturating_add(WINDOW) <= now)
    {
        starts.pop_front();
    }
    if starts.len() < rate as usize {
        starts.push_back(now);
        return None;
    }
    let oldest = starts[starts.len() - rate as usize];
    Some(oldest.saturating_add(WINDOW).duration_since(now))
}

/// Whether a webhook delivery may start now.
#[derive(Debug)]
pub(crate) enum Admit<'a> {
    /// Start it; the permit counts it in flight until dropped.
    Go(EndpointPermit<'a>),
    /// Over the rate limit: a token is free after this long.
    RateLimited(Duration),
    /// The endpoint has its most requests in flight.
    Busy,
}

/// The per-endpoint limits of one dispatcher.
#[derive(Debug, Default)]
pub(crate) struct EndpointLimits {
    slots: Mutex<HashMap<EndpointId, Slot>>,
}

impl EndpointLimits {
    /// Admit one request to `endpoint` at `now` under its `rate` (per second) and
    /// `concurrency` (in flight), either of which may be absent.
    pub(crate) fn admit(
        &self,
        endpoint: EndpointId,
        rate: Option<u32>,
        concurrency: Option<usize>,
        now: Timestamp,
    ) -> Admit<'_> {
        if rate.is_none() && concurrency.is_none() {
            return Admit::Go(EndpointPermit {
                limits: None,
                endpoint,
            });
        }
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = slots.entry(endpoint).or_default();
        if concurrency.is_some_and(|c| slot.running >= c) {
            return Admit::Busy;
        }
        if let Some(rate) = rate {
            if let Some(wait) = take_token(&mut slot.starts, rate, now) {
                return Admit::RateLimited(wait);
            }
        }
        slot.running += 1;
        Admit::Go(EndpointPermit {
            limits: Some(self),
            endpoint,
        })
    }

    /// Add to `into` the requests in flight to each endpoint that has any.
    pub(crate) fn in_flight(&self, into: &mut HashMap<EndpointId, usize>) {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for (id, slot) in slots.iter().filter(|(_, s)| s.running > 0) {
            let n = into.entry(*id).or_default();
            *n = (*n).max(slot.running);
        }
    }

    /// Give back the token an admitted request spent at `at` when the request did not start
    /// after all (the store refused it a permit): this process's bucket is a first gate
    /// only, and must not count a start that never happened.
    pub(crate) fn unspend(&self, endpoint: EndpointId, at: Timestamp) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get_mut(&endpoint) {
            if let Some(i) = slot.starts.iter().rposition(|t| *t == at) {
                slot.starts.remove(i);
            }
        }
    }

    fn done(&self, endpoint: EndpointId) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get_mut(&endpoint) {
            slot.running = slot.running.saturating_sub(1);
            if slot.running == 0 && slot.starts.is_empty() {
                slots.remove(&endpoint);
            }
        }
    }
}

/// One request in flight to an endpoint; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct EndpointPermit<'a> {
    limits: Option<&'a EndpointLimits>,
    endpoint: EndpointId,
}

impl Drop for EndpointPermit<'_> {
    fn drop(&mut self) {
        if let Some(l) = self.limits {
            l.done(self.endpoint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Timestamp {
        Timestamp::EPOCH.saturating_add(Duration::from_millis(n))
    }

    fn ep() -> EndpointId {
        EndpointId::parse("01900000-0000-7000-8000-0000000000aa").unwrap()
    }

    #[test]
    fn tokens_come_back_one_second_after_they_were_spent() {
        let mut s = VecDeque::new();
        // (time, expected wait)
        let rows = [
            (0, None),
            (0, None),
            (0, None),
            (0, Some(1000)),
            (400, Some(600)),
            (1000, None),
            (1000, None),
            (1000, None),
            (1500, Some(500)),
            (2000, None),
        ];
        for (t, want) in rows {
            let got = take_token(&mut s, 3, ms(t)).map(|d| d.as_millis() as u64);
            assert_eq!(got, want, "at {t} ms");
        }
    }

    #[test]
    fn concurrency_is_counted_until_the_permit_drops() {
        let l = EndpointLimits::default();
        let a = l.admit(ep(), None, Some(1), ms(0));
        assert!(matches!(a, Admit::Go(_)));
        assert!(matches!(l.admit(ep(), None, Some(1), ms(0)), Admit::Busy));
        let mut flying = HashMap::default();
        l.in_flight(&mut flying);
        assert_eq!(flying.get(&ep()), Some(&1));
        drop(a);
        assert!(matches!(l.admit(ep(), None, Some(1), ms(0)), Admit::Go(_)));
        assert!(
            l.slots.lock().unwrap().is_empty(),
            "idle endpoints are forgotten"
        );
    }

    #[test]
    fn an_unspent_token_is_free_again() {
        let l = EndpointLimits::default();
        let held = l.admit(ep(), Some(1), None, ms(5));
        assert!(matches!(held, Admit::Go(_)));
        drop(held);
        assert!(matches!(
            l.admit(ep(), Some(1), None, ms(6)),
            Admit::RateLimited(_)
        ));
        l.unspend(ep(), ms(5));
        assert!(matches!(l.admit(ep(), Some(1), None, ms(6)), Admit::Go(_)));
    }

    #[test]
    fn a_busy_endpoint_spends_no_token() {
        let l = EndpointLimits::default();
        let held = l.admit(ep(), Some(2), Some(1), ms(0));
        assert!(matches!(held, Admit::Go(_)));
        assert!(matches!(
            l.admit(ep(), Some(2), Some(1), ms(0)),
            Admit::Busy
        ));
        drop(held);
        assert!(matches!(
            l.admit(ep(), Some(2), Some(1), ms(0)),
            Admit::Go(_)
        ));
        assert!(matches!(
            l.admit(ep(), Some(2), None, ms(10)),
            Admit::RateLimited(d) if d == Duration::from_millis(990)
        ));
    }
}
