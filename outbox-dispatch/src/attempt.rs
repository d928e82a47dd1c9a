//! What every channel's path shares: the run's state, what a delivery task hands back
//! ([`Done`]), the checks right before a start ([`gate`]) and the verdict's inputs and
//! write-up. `deliver` (handlers, webhooks), `email` and `broker` build on it; it imports
//! none of them.

use foldhash::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::breaker::Transition;

use super::Shared;
use outboxkit_core::claim::{Completion, Lease};
use outboxkit_core::ids::ConsumerName;
use outboxkit_core::model::{excerpt, AttemptRecord, Delivery, Destination, DestinationKind};
use outboxkit_core::time::Timestamp;
use outboxkit_core::verdict::{AttemptContext, Outcome, Verdict, VerdictPolicy};

/// The state of one `run` or `run_once` call, shared by its delivery tasks.
#[derive(Debug)]
pub(crate) struct RunState {
    /// `run_once`'s soft deadline.
    pub(crate) deadline: Option<Timestamp>,
    /// Set when the run stops (shutdown, or `run_once` out of budget or work): start
    /// nothing new.
    pub(crate) stopping: CancellationToken,
    /// Set on `run`'s shutdown signal only: cancels running handlers' contexts.
    pub(crate) shutdown: CancellationToken,
    /// Handlers paused by a snooze, until when.
    pub(crate) breakers: Mutex<HashMap<ConsumerName, Timestamp>>,
    /// Deliveries this run has started (`run_once`: all of them; `run`: those in flight).
    pub(crate) started: Mutex<HashSet<outboxkit_core::ids::DeliveryId>>,
    /// The earliest time a delivery handed back over its endpoint's rate limit is due
    /// again (`run_once` waits for it rather than ending with it due).
    /// The due times of the deliveries handed back over a rate limit, each waited for once.
    rate_due: Mutex<std::collections::BTreeSet<Timestamp>>,
    /// Which consumers are paused, as this run last read them (`paused.rs`; each run reads
    /// them afresh before its first claim).
    pub(crate) paused: crate::paused::PausedConsumers,
}

impl RunState {
    pub(crate) fn new(deadline: Option<Timestamp>) -> Self {
        RunState {
            deadline,
            stopping: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            breakers: Mutex::new(HashMap::default()),
            started: Mutex::new(HashSet::default()),
            paused: crate::paused::PausedConsumers::default(),
            rate_due: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// A delivery went back over its endpoint's rate limit, due again at `due` (recorded
    /// once the release is written, from the clock after the write, so the store's due time
    /// is never later than this one).
    pub(crate) fn rate_limited(&self, due: Timestamp) {
        // Only `run_once` (the run with a deadline) waits for them; a run until shutdown
        // polls, and must not collect due times for ever.
        if self.deadline.is_none() {
            return;
        }
        self.rate_due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(due);
    }

    /// The earliest due time, not yet waited for, of the deliveries handed back over a rate
    /// limit, if any; it is removed. Every due time recorded is returned once, so a run that
    /// waits for each in turn and claims after it misses none of them (taking only the
    /// earliest and forgetting the rest ended `run_once` with later ones still due).
    pub(crate) fn take_rate_due(&self) -> Option<Timestamp> {
        self.rate_due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_first()
    }

    /// The shutdown signal arrived: start nothing new and cancel running handlers.
    pub(crate) fn shut_down(&self) {
        self.stopping.cancel();
        self.shutdown.cancel();
    }

    /// Whether `started` covers the whole run (`run_once`, which has a deadline).
    pub(crate) fn whole_run(&self) -> bool {
        self.deadline.is_some()
    }

    pub(crate) fn tripped_until(
        &self,
        consumer: &ConsumerName,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let map = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        map.get(consumer).copied().filter(|until| *until > now)
    }

    pub(crate) fn trip(&self, consumer: &ConsumerName, until: Timestamp) {
        let mut map = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.entry(consumer.clone()).or_insert(until);
        *e = (*e).max(until);
    }
}

/// What a delivery task hands back to the loop.
#[derive(Debug)]
pub(crate) enum Done {
    /// A verdict to write.
    Completed {
        lease: Lease,
        completion: Completion,
        meta: Box<Meta>,
    },
    /// Put back unstarted, attempt refunded.
    Release {
        lease: Lease,
        delay: Duration,
        duplicate: bool,
        /// Handed back over its endpoint's rate limit (`run_once` waits for it).
        rate_limited: bool,
    },
    /// The lease was lost before the send.
    LeaseLost,
}

impl Done {
    /// Put back unstarted, due after `delay`, attempt refunded.
    pub(crate) fn release(lease: Lease, delay: Duration) -> Done {
        Done::Release {
            lease,
            delay,
            duplicate: false,
            rate_limited: false,
        }
    }

    /// Put back unstarted over its endpoint's rate limit, due after `delay`.
    pub(crate) fn rate_limited(lease: Lease, delay: Duration) -> Done {
        Done::Release {
            lease,
            delay,
            duplicate: false,
            rate_limited: true,
        }
    }

    /// Put back unstarted, due at once (shutdown, abort, budget), attempt refunded.
    pub(crate) fn release_now(lease: Lease) -> Done {
        Done::release(lease, Duration::ZERO)
    }

    /// Handed out again while this run has it: put back without running it twice.
    pub(crate) fn duplicate(lease: Lease, delay: Duration) -> Done {
        Done::Release {
            lease,
            delay,
            duplicate: true,
            rate_limited: false,
        }
    }
}

/// What the report and observer need to know about a finished delivery.
#[derive(Clone, Debug)]
pub(crate) struct Meta {
    pub(crate) topic: outboxkit_core::ids::Topic,
    pub(crate) tenant: outboxkit_core::ids::TenantId,
    pub(crate) kind: DestinationKind,
    pub(crate) attempt: u32,
    pub(crate) duration: Duration,
    /// The change of the endpoint's circuit this attempt caused.
    pub(crate) circuit: Option<Transition>,
    /// The message delivered.
    pub(crate) message_id: outboxkit_core::ids::MessageId,
    /// The webhook endpoint, for a webhook delivery.
    pub(crate) endpoint: Option<outboxkit_core::ids::EndpointId>,
    /// When the attempt started (the decision's time when nothing was sent).
    pub(crate) started: Timestamp,
    /// The producer's trace context stored with the message (set by `deliver`).
    pub(crate) traceparent: Option<outboxkit_core::Traceparent>,
}

pub(crate) enum Gate {
    Go,
    Release(Duration),
}

/// The checks made right before a delivery starts.
pub(crate) fn gate(
    shared: &Shared,
    run: &RunState,
    timeout: Duration,
    consumer: Option<&ConsumerName>,
) -> Gate {
    let now = shared.clock.now();
    if run.stopping.is_cancelled() {
        return Gate::Release(Duration::ZERO);
    }
    if let Some(until) = consumer.and_then(|c| run.tripped_until(c, now)) {
        return Gate::Release(until.duration_since(now));
    }
    if let Some(deadline) = run.deadline {
        if now
            .saturating_add(timeout)
            .saturating_add(shared.config.reservation_margin)
            > deadline
        {
            return Gate::Release(Duration::ZERO);
        }
    }
    Gate::Go
}

pub(crate) fn verdict_policy(
    shared: &Shared,
    retry: outboxkit_core::retry::RetryPolicy,
    mail_idempotent: bool,
) -> VerdictPolicy {
    let c = &shared.config;
    VerdictPolicy {
        retry,
        held_probe_interval: c.held_probe_interval,
        park_delay: c.park_delay,
        max_snoozes: c.max_snoozes,
        max_retry_after: Duration::from_secs(24 * 3600),
        mail_idempotent,
    }
}

pub(crate) fn context(shared: &Shared, lease: &Lease) -> AttemptContext {
    AttemptContext {
        attempt: lease.attempts,
        snoozes: lease.snoozes,
        probe: lease.is_probe(),
        now: shared.clock.now(),
        jitter: shared.jitter.next(),
    }
}

pub(crate) fn completed(
    lease: Lease,
    verdict: Verdict,
    attempt: Option<AttemptRecord>,
    delivery: &Delivery,
    started: Timestamp,
    finished: Timestamp,
) -> Done {
    let meta = Meta {
        topic: delivery.topic.clone(),
        tenant: delivery.tenant.clone(),
        kind: delivery.destination.kind(),
        attempt: lease.attempts,
        duration: finished.duration_since(started),
        circuit: None,
        message_id: delivery.message_id,
        endpoint: match &delivery.destination {
            Destination::Webhook(e) => Some(*e),
            _ => None,
        },
        started,
        traceparent: None,
    };
    Done::Completed {
        lease,
        completion: Completion { verdict, attempt },
        meta: Box::new(meta),
    }
}

pub(crate) fn record(
    outcome: &Outcome,
    started: Timestamp,
    finished: Timestamp,
    text: &str,
) -> Option<AttemptRecord> {
    outcome.attempt_outcome().map(|o| AttemptRecord {
        detail: None,
        started_at: started,
        finished_at: finished,
        outcome: o,
        status_code: outcome.status_code(),
        excerpt: (!text.is_empty()).then(|| excerpt(text)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_unix_millis(ms).unwrap()
    }

    #[test]
    fn run_once_waits_for_every_rate_limited_due_time_in_order() {
        let run = RunState::new(Some(at(10_000)));
        for ms in [1_400, 1_200, 1_600, 1_200] {
            run.rate_limited(at(ms));
        }
        // Each once, earliest first: after waiting for 1,200 the run still knows of 1,400
        // and 1,600 (it used to forget them and end with deliveries due).
        let taken: Vec<_> = std::iter::from_fn(|| run.take_rate_due()).collect();
        assert_eq!(taken, vec![at(1_200), at(1_400), at(1_600)]);
        run.rate_limited(at(2_000));
        assert_eq!(run.take_rate_due(), Some(at(2_000)));
        assert_eq!(run.take_rate_due(), None);
    }

    #[test]
    fn a_run_until_shutdown_keeps_no_due_times() {
        let run = RunState::new(None);
        run.rate_limited(at(1_000));
        assert_eq!(run.take_rate_due(), None);
    }
}
