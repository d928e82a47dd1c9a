//! What a run did ([`Report`]) and the metrics hook ([`Observer`]).

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use serde::Serialize;

use outboxkit_core::ids::{DeliveryId, EndpointId, MessageId, TenantId, Topic};

use crate::breaker::CircuitState;
use outboxkit_core::model::{AttemptOutcome, DeadReason, DestinationKind};
use outboxkit_core::store::Stats;
use outboxkit_core::time::Timestamp;
use outboxkit_core::verdict::Verdict;
use outboxkit_core::Traceparent;

/// The most dead delivery ids a report lists.
pub const DEAD_IDS_LIMIT: usize = 25;

/// Counts for one topic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TopicReport {
    /// Claimed.
    pub claimed: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Scheduled for a retry.
    pub retried: u64,
    /// Held.
    pub held: u64,
    /// Snoozed.
    pub snoozed: u64,
    /// Dead.
    pub dead: u64,
}

/// What a run did. New counters may be added in minor releases (`#[non_exhaustive]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// Deliveries claimed.
    pub claimed: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Scheduled for a retry.
    pub retried: u64,
    /// Held (401/403).
    pub held: u64,
    /// Snoozed.
    pub snoozed: u64,
    /// Parked (paused endpoint).
    pub parked: u64,
    /// Dead.
    pub dead: u64,
    /// Released unstarted (budget, breaker, shutdown, duplicates), attempt refunded.
    pub released: u64,
    /// Completions or releases whose lease was lost.
    pub lease_lost: u64,
    /// Deliveries handed out again while this run already had them.
    pub duplicate_in_run: u64,
    /// Claims that returned work.
    pub batches: u64,
    /// Wall time of the run (by the dispatcher's clock).
    pub run_time: Duration,
    /// Counts per topic.
    pub per_topic: BTreeMap<Topic, TopicReport>,
    /// The first dead delivery ids.
    pub dead_ids: Vec<DeliveryId>,
    /// Queue statistics at the end, when the store answered within the deadline.
    pub stats: Option<Stats>,
    /// Endpoint circuits that opened (after consecutive failures, or a failed probe).
    pub circuits_opened: u64,
    /// Endpoint circuits that closed again (a probe or another attempt was answered).
    pub circuits_closed: u64,
    /// The endpoints whose circuit was not closed when the run ended, and its state.
    pub circuits: BTreeMap<EndpointId, CircuitState>,
}

impl Report {
    pub(crate) fn record_claim(&mut self, topic: &Topic) {
        self.claimed += 1;
        self.per_topic.entry(topic.clone()).or_default().claimed += 1;
    }

    pub(crate) fn record_verdict(&mut self, topic: &Topic, id: DeliveryId, verdict: &Verdict) {
        let t = self.per_topic.entry(topic.clone()).or_default();
        match verdict {
            Verdict::Succeeded => {
                self.succeeded += 1;
                t.succeeded += 1;
            }
            Verdict::Retry { .. } => {
                self.retried += 1;
                t.retried += 1;
            }
            Verdict::Held { .. } => {
                self.held += 1;
                t.held += 1;
            }
            Verdict::Snoozed { .. } => {
                self.snoozed += 1;
                t.snoozed += 1;
            }
            Verdict::Dead { .. } => {
                self.dead += 1;
                t.dead += 1;
                if self.dead_ids.len() < DEAD_IDS_LIMIT {
                    self.dead_ids.push(id);
                }
            }
            // Parked, awaiting its endpoint, or a waiting verdict added later: not a result.
            _ => self.parked += 1,
        }
    }

    /// Add another report's counts to this one (run time and stats are left alone).
    pub fn absorb(&mut self, other: Report) {
        self.claimed += other.claimed;
        self.succeeded += other.succeeded;
        self.retried += other.retried;
        self.held += other.held;
        self.snoozed += other.snoozed;
        self.parked += other.parked;
        self.dead += other.dead;
        self.released += other.released;
        self.lease_lost += other.lease_lost;
        self.duplicate_in_run += other.duplicate_in_run;
        self.batches += other.batches;
        self.circuits_opened += other.circuits_opened;
        self.circuits_closed += other.circuits_closed;
        self.circuits.extend(other.circuits);
        for (topic, t) in other.per_topic {
            let mine = self.per_topic.entry(topic).or_default();
            mine.claimed += t.claimed;
            mine.succeeded += t.succeeded;
            mine.retried += t.retried;
            mine.held += t.held;
            mine.snoozed += t.snoozed;
            mine.dead += t.dead;
        }
        let room = DEAD_IDS_LIMIT.saturating_sub(self.dead_ids.len());
        self.dead_ids.extend(other.dead_ids.into_iter().take(room));
    }

    /// Deliveries that reached a verdict.
    pub fn completed(&self) -> u64 {
        self.succeeded + self.retried + self.held + self.snoozed + self.parked + self.dead
    }

    /// Claims per delivery: deliveries claimed ÷ deliveries that reached a verdict
    /// ([`Report::completed`]). 1.0 when every claimed delivery was sent (or otherwise
    /// decided); above it when deliveries were claimed and handed back unstarted (an
    /// endpoint at its cap or over its rate limit, a shutdown) and claimed again. `None`
    /// when nothing reached a verdict.
    pub fn claims_per_delivery(&self) -> Option<f64> {
        let done = self.completed();
        (done > 0).then(|| self.claimed as f64 / done as f64)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "claimed {} succeeded {} retried {} held {} snoozed {} parked {} dead {} released {} lease-lost {} duplicate-in-run {} batches {} circuits-opened {} circuits-open-at-end {} in {:?}",
            self.claimed, self.succeeded, self.retried, self.held, self.snoozed, self.parked, self.dead,
            self.released, self.lease_lost, self.duplicate_in_run, self.batches,
            self.circuits_opened, self.circuits.len(), self.run_time
        )
    }
}

/// One finished delivery, as the observer sees it (no payload, no address, no secret).
/// New fields may be added in minor releases (`#[non_exhaustive]`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeliveryEvent<'a> {
    /// The delivery.
    pub delivery_id: DeliveryId,
    /// Its topic.
    pub topic: &'a Topic,
    /// Its channel.
    pub kind: DestinationKind,
    /// The attempt number.
    pub attempt: u32,
    /// The verdict.
    pub verdict: &'a Verdict,
    /// How long the attempt took.
    pub duration: Duration,
    /// When the attempt started (by the dispatcher's clock; when nothing was sent, the time
    /// of the decision).
    pub started_at: Timestamp,
    /// The message delivered.
    pub message_id: MessageId,
    /// The webhook endpoint, for a webhook delivery (an opaque id, never its URL).
    pub endpoint: Option<EndpointId>,
    /// The attempt's result as the ledger records it; `None` when nothing was tried (a
    /// paused, disabled or missing endpoint).
    pub outcome: Option<AttemptOutcome>,
    /// The HTTP status of the answer, when there was one.
    pub status_code: Option<u16>,
    /// The producer's W3C trace context stored with the message, if any.
    pub traceparent: Option<Traceparent>,
}

impl DeliveryEvent<'_> {
    /// Whether an attempt was made and failed: the ledger recorded a failure and the verdict
    /// is a retry, a hold or dead (a snooze, a parked delivery or one awaiting its endpoint
    /// is not a failed attempt).
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Some(AttemptOutcome::Failed(_)))
            && matches!(
                self.verdict,
                Verdict::Retry { .. } | Verdict::Held { .. } | Verdict::Dead { .. }
            )
    }
}

/// A metrics hook. Its failures (panics) are caught and logged; they never change an
/// outcome.
pub trait Observer: Send + Sync + fmt::Debug + 'static {
    /// A claim returned `size` deliveries.
    fn on_batch(&self, size: usize) {
        let _ = size;
    }
    /// A delivery reached a verdict.
    fn on_delivery(&self, event: &DeliveryEvent<'_>) {
        let _ = event;
    }
    /// A delivery went dead (after the store recorded it; also reported to
    /// [`Observer::on_delivery`]).
    fn on_dead(&self, event: &DeadLetterEvent<'_>) {
        let _ = event;
    }
    /// A claim returned (empty, full or failed), with how long the store took.
    fn on_claim(&self, event: &ClaimEvent) {
        let _ = event;
    }
    /// A group of finished deliveries was written back (completions, releases), with how
    /// long the store took.
    fn on_settle(&self, event: &SettleEvent) {
        let _ = event;
    }
    /// An endpoint's circuit changed state (opened, half-open after a failed probe's
    /// cool-down is not reported until the probe's outcome; closed).
    fn on_circuit(&self, event: &CircuitEvent<'_>) {
        let _ = event;
    }
}

/// One claim, for [`Observer::on_claim`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClaimEvent {
    /// Deliveries claimed (0 when none was due or the claim failed).
    pub size: usize,
    /// How long the store's claim took.
    pub duration: Duration,
    /// Whether the claim failed.
    pub failed: bool,
}

/// One write-back of finished deliveries, for [`Observer::on_settle`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SettleEvent {
    /// Deliveries whose verdict was written.
    pub completed: u64,
    /// Deliveries given back without spending an attempt.
    pub released: u64,
    /// Deliveries whose lease had been lost (their outcome was not written).
    pub lease_lost: u64,
    /// How long the store's completion and release calls took.
    pub duration: Duration,
}

/// An endpoint's circuit changed, for [`Observer::on_circuit`]. No URL, no address.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CircuitEvent<'a> {
    /// The endpoint.
    pub endpoint: EndpointId,
    /// Its tenant.
    pub tenant: &'a TenantId,
    /// The new state.
    pub state: CircuitState,
    /// Consecutive retryable failures counted (the threshold when it opened).
    pub failures: u32,
}

/// A delivery that went dead, for [`Observer::on_dead`]. No payload, no address.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeadLetterEvent<'a> {
    /// The delivery.
    pub delivery_id: DeliveryId,
    /// Its tenant.
    pub tenant: &'a TenantId,
    /// Its topic.
    pub topic: &'a Topic,
    /// Its channel.
    pub kind: DestinationKind,
    /// Why it is dead.
    pub reason: DeadReason,
    /// Attempts spent.
    pub attempts: u32,
}

/// Call an observer, swallowing (and logging) a panic.
pub(crate) fn observe(f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        tracing::warn!("an outbox observer panicked; the outcome is unchanged");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboxkit_core::model::DeadReason;

    fn id(n: u128) -> DeliveryId {
        DeliveryId::from_uuid(uuid::Uuid::from_u128(
            0x0190_0000_0000_7000_8000_0000_0000_0000 | n,
        ))
        .unwrap()
    }

    #[test]
    fn a_failed_attempt_is_a_recorded_failure_that_retries_holds_or_dies() {
        use outboxkit_core::model::ErrorClass;
        let topic = Topic::new("a.b").unwrap();
        let at = Timestamp::EPOCH;
        let event = |verdict: &Verdict, outcome: Option<AttemptOutcome>| {
            let e = DeliveryEvent {
                delivery_id: id(1),
                topic: &topic,
                kind: DestinationKind::Webhook,
                attempt: 1,
                verdict,
                duration: Duration::ZERO,
                started_at: at,
                message_id: MessageId::from_uuid(uuid::Uuid::from_u128(
                    0x0190_0000_0000_7000_8000_0000_0000_0001,
                ))
                .unwrap(),
                endpoint: None,
                outcome,
                status_code: None,
                traceparent: None,
            };
            e.failed()
        };
        let failed = Some(AttemptOutcome::Failed(ErrorClass::Network));
        assert!(event(&Verdict::Retry { at }, failed));
        assert!(event(&Verdict::Held { probe_at: at }, failed));
        let dead = Verdict::Dead {
            reason: DeadReason::Permanent,
        };
        assert!(event(&dead, failed));
        // Nothing tried (a missing endpoint), a success, a snooze, a parked delivery.
        assert!(!event(&dead, None));
        assert!(!event(&Verdict::Succeeded, Some(AttemptOutcome::Succeeded)));
        assert!(!event(&Verdict::Snoozed { until: at }, failed));
        assert!(!event(&Verdict::Parked { until: at }, failed));
    }

    #[test]
    fn absorbing_partial_reports_adds_up_and_keeps_25_dead_ids() {
        let t = Topic::new("a.b").unwrap();
        let dead = Verdict::Dead {
            reason: DeadReason::Permanent,
        };
        let mut total = Report::default();
        for chunk in 0..3u128 {
            let mut part = Report::default();
            for i in 0..10 {
                part.record_claim(&t);
                part.record_verdict(&t, id(chunk * 10 + i), &dead);
            }
            part.record_verdict(&t, id(999), &Verdict::Succeeded);
            total.absorb(part);
        }
        assert_eq!((total.claimed, total.dead, total.succeeded), (30, 30, 3));
        assert_eq!(total.per_topic[&t].dead, 30);
        assert_eq!(total.dead_ids.len(), DEAD_IDS_LIMIT);
        assert_eq!(total.dead_ids[0], id(0));
        assert_eq!(total.completed(), 33);
    }
}
