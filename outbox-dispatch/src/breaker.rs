//! The per-endpoint circuit breaker: after `threshold` consecutive failures of the
//! retryable kinds (a timeout, a connection error, a 5xx answer) an endpoint is *open*: its
//! deliveries are not claimed and spend no attempts for a cool-down that doubles while
//! failures continue (up to a ceiling). When the cool-down ends it is *half-open*: one probe
//! delivery goes; its success closes the circuit, its failure opens it again.
//!
//! The state lives in the dispatcher (each relay process has its own) and is rebuilt after
//! a restart from what the store keeps on the endpoint: an endpoint whose last delivery
//! failed in a retryable way starts half-open, so the first delivery after a restart is a
//! single probe rather than a wave of requests into a receiver that may still hang.
//!
//! Distinct from the per-consumer snooze breaker (handlers) and from 401/403 holds (the
//! receiver answered; those deliveries are held in the store).

use foldhash::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use outboxkit_core::broker::BrokerFailure;
use outboxkit_core::endpoint::LastDelivery;
use outboxkit_core::ids::EndpointId;
use outboxkit_core::model::{AttemptOutcome, ErrorClass};
use outboxkit_core::time::Timestamp;
use outboxkit_core::verdict::Outcome;

/// The state of one endpoint's circuit, as reports, observers and the CLI show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CircuitState {
    /// Deliveries flow.
    Closed,
    /// No delivery is claimed or started until `until`.
    Open {
        /// When the next probe may go.
        until: Timestamp,
    },
    /// One probe delivery decides: success closes, failure opens again.
    HalfOpen,
}

impl CircuitState {
    /// `closed`, `open` or `half-open`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open { .. } => "open",
            CircuitState::HalfOpen => "half-open",
        }
    }

    /// The state a dispatcher starting now adopts for an endpoint whose last delivery is
    /// `last`: half-open after a retryable failure (the first delivery is a single probe),
    /// closed otherwise.
    pub fn on_start(last: Option<&LastDelivery>) -> CircuitState {
        match last {
            Some(l) if counts_as_failure_class(l.outcome, l.status_code) => CircuitState::HalfOpen,
            _ => CircuitState::Closed,
        }
    }
}

/// Whether an answer of this kind trips the breaker: timeouts, connection errors and 5xx.
fn counts_as_failure_class(outcome: AttemptOutcome, status: Option<u16>) -> bool {
    match outcome {
        AttemptOutcome::Failed(ErrorClass::Timeout | ErrorClass::Network) => true,
        AttemptOutcome::Failed(ErrorClass::Response5xx) => status.is_none_or(|s| s >= 500),
        _ => false,
    }
}

/// What an attempt's outcome means to the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The receiver answered (any status below 500, or a success): it is alive.
    Alive,
    /// A timeout, a connection error or a 5xx.
    Failed,
    /// Nothing about the receiver's health (refused by policy, DNS, not tried).
    Neutral,
}

impl Signal {
    pub(crate) fn of(outcome: &Outcome) -> Signal {
        match outcome {
            Outcome::Http { status, .. } if *status >= 500 => Signal::Failed,
            Outcome::Http { .. } => Signal::Alive,
            Outcome::Transport(ErrorClass::Timeout | ErrorClass::Network) => Signal::Failed,
            // A broker sink: no connection, no acknowledgement in time, or the broker cannot
            // take messages now; any other answer means it is there.
            Outcome::Broker(Err(
                BrokerFailure::Connection | BrokerFailure::Timeout | BrokerFailure::Unavailable,
            )) => Signal::Failed,
            Outcome::Broker(_) => Signal::Alive,
            _ => Signal::Neutral,
        }
    }
}

/// The breaker's settings (from `DispatcherConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BreakerSettings {
    pub(crate) threshold: u32,
    pub(crate) cooldown: Duration,
    pub(crate) max_cooldown: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Timestamp,
        cooldown: Duration,
    },
    HalfOpen {
        probing: bool,
        cooldown: Duration,
    },
}

/// Whether a delivery to an endpoint may start now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Start it; `probe` when it is the half-open circuit's one probe.
    Go { probe: bool },
    /// Do not start it: put it back, due after this long.
    Wait(Duration),
}

/// A change of an endpoint's (or a broker sink's) circuit, for the report and the observer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transition<K = EndpointId> {
    pub(crate) endpoint: K,
    pub(crate) state: CircuitState,
    pub(crate) failures: u32,
}

/// The circuits of one dispatcher's endpoints (keyed by endpoint id) or broker sinks (keyed
/// by consumer name).
#[derive(Debug)]
pub(crate) struct Breakers<K = EndpointId> {
    settings: Option<BreakerSettings>,
    states: Mutex<HashMap<K, State>>,
}

impl<K: Clone + Eq + Hash + Ord> Breakers<K> {
    /// `None`: the breaker is off.
    pub(crate) fn new(settings: Option<BreakerSettings>) -> Self {
        Breakers {
            settings,
            states: Mutex::new(HashMap::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, State>> {
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adopt the state rebuilt from the endpoint's last delivery the first time this
    /// dispatcher sees the endpoint; later sightings change nothing.
    pub(crate) fn seed(&self, endpoint: K, last: Option<&LastDelivery>) {
        let Some(set) = self.settings else { return };
        let mut states = self.lock();
        states
            .entry(endpoint)
            .or_insert(match CircuitState::on_start(last) {
                CircuitState::HalfOpen => State::HalfOpen {
                    probing: false,
                    cooldown: set.cooldown,
                },
                _ => State::Closed { failures: 0 },
            });
    }

    /// Whether a delivery to `endpoint` may start at `now`. An open circuit whose cool-down
    /// has ended turns half-open and lets this delivery go as its probe.
    pub(crate) fn pass(&self, endpoint: &K, now: Timestamp, probe_wait: Duration) -> Pass {
        if self.settings.is_none() {
            return Pass::Go { probe: false };
        }
        let mut states = self.lock();
        let Some(state) = states.get_mut(endpoint) else {
            return Pass::Go { probe: false };
        };
        match *state {
            State::Closed { .. } => Pass::Go { probe: false },
            State::Open { until, .. } if now < until => Pass::Wait(until.duration_since(now)),
            State::Open { cooldown, .. }
            | State::HalfOpen {
                probing: false,
                cooldown,
            } => {
                *state = State::HalfOpen {
                    probing: true,
                    cooldown,
                };
                Pass::Go { probe: true }
            }
            State::HalfOpen { probing: true, .. } => Pass::Wait(probe_wait),
        }
    }

    /// A probe that was admitted but not sent (released before the request): the next
    /// delivery may probe.
    pub(crate) fn probe_abandoned(&self, endpoint: &K) {
        let mut states = self.lock();
        if let Some(State::HalfOpen { probing, .. }) = states.get_mut(endpoint) {
            *probing = false;
        }
    }

    /// Record what an attempt to `endpoint` finished with at `now`; returns the change of
    /// state, if any.
    pub(crate) fn record(
        &self,
        endpoint: K,
        signal: Signal,
        probe: bool,
        now: Timestamp,
    ) -> Option<Transition<K>> {
        let set = self.settings?;
        let mut states = self.lock();
        let state = states
            .entry(endpoint.clone())
            .or_insert(State::Closed { failures: 0 });
        let before = *state;
        let next = match (before, signal) {
            (_, Signal::Neutral) if !probe => before,
            // A probe that told nothing lets the next delivery probe.
            (State::HalfOpen { cooldown, .. }, Signal::Neutral) => State::HalfOpen {
                probing: false,
                cooldown,
            },
            (_, Signal::Neutral) => before,
            (_, Signal::Alive) => State::Closed { failures: 0 },
            (State::Closed { failures }, Signal::Failed) => {
                let failures = failures.saturating_add(1);
                if failures >= set.threshold {
                    State::Open {
                        until: now.saturating_add(set.cooldown),
                        cooldown: set.cooldown,
                    }
                } else {
                    State::Closed { failures }
                }
            }
            // The probe failed: open again, for twice as long.
            (State::HalfOpen { cooldown, .. }, Signal::Failed) if probe => {
                let cooldown = cooldown.saturating_mul(2).min(set.max_cooldown);
                State::Open {
                    until: now.saturating_add(cooldown),
                    cooldown,
                }
            }
            // Requests started before the circuit opened keep failing: no change.
            (State::HalfOpen { .. } | State::Open { .. }, Signal::Failed) => before,
        };
        *state = next;
        let changed = std::mem::discriminant(&before) != std::mem::discriminant(&next)
            || matches!((before, next), (State::Open { until: a, .. }, State::Open { until: b, .. }) if a != b);
        changed.then(|| Transition {
            endpoint,
            state: public(next),
            failures: match next {
                State::Closed { failures } => failures,
                _ => set.threshold,
            },
        })
    }

    /// The state of `endpoint`'s circuit (closed when this dispatcher has not seen it).
    pub(crate) fn state(&self, endpoint: &K) -> CircuitState {
        self.lock()
            .get(endpoint)
            .map_or(CircuitState::Closed, |s| public(*s))
    }

    /// Every endpoint whose circuit is not closed, with its state.
    pub(crate) fn not_closed(&self) -> BTreeMap<K, CircuitState> {
        self.lock()
            .iter()
            .map(|(id, s)| (id.clone(), public(*s)))
            .filter(|(_, s)| *s != CircuitState::Closed)
            .collect()
    }

    /// Endpoints whose deliveries must not be claimed at `now`: open circuits, and
    /// half-open ones whose probe is out.
    pub(crate) fn blocked(&self, now: Timestamp, into: &mut BTreeSet<K>) {
        if self.settings.is_none() {
            return;
        }
        for (id, s) in self.lock().iter() {
            let blocked = match s {
                State::Open { until, .. } => now < *until,
                State::HalfOpen { probing, .. } => *probing,
                State::Closed { .. } => false,
            };
            if blocked {
                into.insert(id.clone());
            }
        }
    }
}

fn public(s: State) -> CircuitState {
    match s {
        State::Closed { .. } => CircuitState::Closed,
        State::Open { until, .. } => CircuitState::Open { until },
        State::HalfOpen { .. } => CircuitState::HalfOpen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Timestamp {
        Timestamp::EPOCH.saturating_add(Duration::from_secs(n))
    }

    fn ep() -> EndpointId {
        EndpointId::parse("01900000-0000-7000-8000-0000000000aa").unwrap()
    }

    fn breakers() -> Breakers {
        Breakers::new(Some(BreakerSettings {
            threshold: 3,
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(25),
        }))
    }

    const WAIT: Duration = Duration::from_secs(1);

    #[test]
    fn opens_after_consecutive_failures_probes_and_closes() {
        let b = breakers();
        let e = ep();
        assert_eq!(b.record(e, Signal::Failed, false, s(0)), None);
        // An answer in between resets the count.
        assert_eq!(b.record(e, Signal::Alive, false, s(0)), None);
        assert_eq!(b.record(e, Signal::Failed, false, s(1)), None);
        assert_eq!(b.record(e, Signal::Failed, false, s(1)), None);
        let t = b.record(e, Signal::Failed, false, s(2)).unwrap();
        assert_eq!(t.state, CircuitState::Open { until: s(12) });
        let mut blocked = BTreeSet::new();
        b.blocked(s(5), &mut blocked);
        assert!(blocked.contains(&e));
        assert_eq!(b.pass(&e, s(5), WAIT), Pass::Wait(Duration::from_secs(7)));
        // Cool-down over: one probe, the others wait.
        assert_eq!(b.pass(&e, s(12), WAIT), Pass::Go { probe: true });
        assert_eq!(b.state(&e), CircuitState::HalfOpen);
        assert_eq!(b.pass(&e, s(12), WAIT), Pass::Wait(WAIT));
        // The probe fails: open for twice as long.
        let t = b.record(e, Signal::Failed, true, s(13)).unwrap();
        assert_eq!(t.state, CircuitState::Open { until: s(33) });
        assert_eq!(b.pass(&e, s(33), WAIT), Pass::Go { probe: true });
        // Again: capped at the ceiling.
        let t = b.record(e, Signal::Failed, true, s(34)).unwrap();
        assert_eq!(t.state, CircuitState::Open { until: s(59) });
        assert_eq!(b.pass(&e, s(60), WAIT), Pass::Go { probe: true });
        let t = b.record(e, Signal::Alive, true, s(60)).unwrap();
        assert_eq!(t.state, CircuitState::Closed);
        assert_eq!(b.pass(&e, s(60), WAIT), Pass::Go { probe: false });
        let mut blocked = BTreeSet::new();
        b.blocked(s(60), &mut blocked);
        assert!(blocked.is_empty());
    }

    #[test]
    fn late_failures_of_an_open_circuit_change_nothing_and_abandoned_probes_free_the_slot() {
        let b = breakers();
        let e = ep();
        for _ in 0..3 {
            b.record(e, Signal::Failed, false, s(0));
        }
        assert_eq!(b.record(e, Signal::Failed, false, s(1)), None);
        assert_eq!(b.state(&e), CircuitState::Open { until: s(10) });
        assert_eq!(b.pass(&e, s(10), WAIT), Pass::Go { probe: true });
        b.probe_abandoned(&e);
        assert_eq!(b.pass(&e, s(10), WAIT), Pass::Go { probe: true });
        // A probe that told nothing (DNS, policy) lets the next one probe.
        assert_eq!(b.record(e, Signal::Neutral, true, s(11)), None);
        assert_eq!(b.pass(&e, s(11), WAIT), Pass::Go { probe: true });
    }

    #[test]
    fn a_restart_rebuilds_a_half_open_circuit_from_the_last_delivery() {
        let last = |outcome, status_code| LastDelivery {
            outcome,
            status_code,
            at: s(0),
        };
        let rows = [
            (
                last(AttemptOutcome::Failed(ErrorClass::Timeout), None),
                CircuitState::HalfOpen,
            ),
            (
                last(AttemptOutcome::Failed(ErrorClass::Network), None),
                CircuitState::HalfOpen,
            ),
            (
                last(AttemptOutcome::Failed(ErrorClass::Response5xx), Some(503)),
                CircuitState::HalfOpen,
            ),
            (
                last(AttemptOutcome::Failed(ErrorClass::Response4xx), Some(404)),
                CircuitState::Closed,
            ),
            (
                last(AttemptOutcome::Succeeded, Some(200)),
                CircuitState::Closed,
            ),
        ];
        for (l, want) in &rows {
            assert_eq!(CircuitState::on_start(Some(l)), *want, "{l:?}");
        }
        assert_eq!(CircuitState::on_start(None), CircuitState::Closed);
        let b = breakers();
        b.seed(ep(), Some(&rows[0].0));
        b.seed(ep(), None); // later sightings change nothing
        assert_eq!(b.pass(&ep(), s(0), WAIT), Pass::Go { probe: true });
        assert_eq!(b.pass(&ep(), s(0), WAIT), Pass::Wait(WAIT));
    }

    #[test]
    fn an_off_breaker_never_blocks() {
        let b = Breakers::new(None);
        for _ in 0..10 {
            assert_eq!(b.record(ep(), Signal::Failed, false, s(0)), None);
        }
        assert_eq!(b.pass(&ep(), s(0), WAIT), Pass::Go { probe: false });
    }
}
