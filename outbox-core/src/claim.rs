//! The claim protocol's values: what a claim asks for, what it hands out, and
//! how a verdict or a release turns into the new state of a delivery row. Stores write the
//! [`DeliveryUpdate`]s computed here, so every backend changes rows the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{ClaimToken, ConsumerName, DeliveryId, EndpointId, TenantId, Topic};
use crate::model::{
    AttemptRecord, DeadReason, Delivery, DeliveryStatus, Destination, LastOutcome, Message,
};
use crate::time::Timestamp;
use crate::verdict::Verdict;

/// The most deliveries one claim may take.
pub const MAX_BATCH: u32 = 1000;

/// What a worker can serve, and the attempt budget it applies (rows at or past the budget
/// are moved to `dead` at claim time).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClaimSource {
    /// Deliveries to the named consumer.
    Handler {
        /// The consumer.
        consumer: ConsumerName,
        /// Its budget.
        max_attempts: u32,
    },
    /// Every webhook delivery.
    Webhooks {
        /// The budget (the largest of any tenant's).
        max_attempts: u32,
    },
    /// Every e-mail delivery.
    Email {
        /// The budget.
        max_attempts: u32,
    },
}

impl ClaimSource {
    /// Its attempt budget.
    pub fn max_attempts(&self) -> u32 {
        match self {
            ClaimSource::Handler { max_attempts, .. }
            | ClaimSource::Webhooks { max_attempts }
            | ClaimSource::Email { max_attempts } => *max_attempts,
        }
    }
}

/// One claim: take up to `batch_size` due deliveries that these sources serve.
///
/// # Fair order
/// A *group* is a tenant and a destination: one endpoint, one consumer, or one e-mail
/// recipient. A store fills the batch in rounds: round 1 takes the first claimable delivery
/// of every group that has one, round 2 the second, and so on until the batch is full.
/// Within a round, groups go in the order of their oldest claimable delivery; within a group,
/// deliveries go in `(next_attempt_at, enqueue order)`, behind the ordering-key barrier as
/// always. So a backlog in one group delays another group's fresh delivery by at most one
/// claim, and two backlogs share a batch within one of each other
/// (`claim_gives_every_group_a_turn`, `claim_shares_a_batch_between_backlogs`). The rules
/// are written once in [`claim_rules`](crate::claim_rules) and every store's claims are
/// compared with them (`claim_order_follows_the_fair_rounds`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRequest {
    batch_size: u32,
    lease: Duration,
    sources: Vec<ClaimSource>,
    exclude_endpoints: BTreeSet<EndpointId>,
    endpoint_limit: Option<u32>,
    endpoint_room: BTreeMap<EndpointId, u32>,
    dormant_topics: BTreeSet<Topic>,
}

impl ClaimRequest {
    /// A claim of up to `batch_size` (1–1000) deliveries under a lease of `lease`
    /// (1 s – 24 h). Add at least one source before [`ClaimRequest::validate`]: an empty
    /// allowlist is refused, never read as "everything".
    pub fn new(batch_size: u32, lease: Duration) -> Self {
        ClaimRequest {
            batch_size,
            lease,
            sources: Vec::new(),
            exclude_endpoints: BTreeSet::new(),
            endpoint_limit: None,
            endpoint_room: BTreeMap::new(),
            dormant_topics: BTreeSet::new(),
        }
    }

    /// Serve deliveries to `consumer`.
    pub fn handler(mut self, consumer: ConsumerName, max_attempts: u32) -> Self {
        self.sources.push(ClaimSource::Handler {
            consumer,
            max_attempts,
        });
        self
    }

    /// Serve webhook deliveries.
    pub fn webhooks(mut self, max_attempts: u32) -> Self {
        self.sources.push(ClaimSource::Webhooks { max_attempts });
        self
    }

    /// Serve e-mail deliveries.
    pub fn email(mut self, max_attempts: u32) -> Self {
        self.sources.push(ClaimSource::Email { max_attempts });
        self
    }

    /// Add a source.
    pub fn source(mut self, source: ClaimSource) -> Self {
        self.sources.push(source);
        self
    }

    /// Take no webhook delivery to these endpoints (an open circuit breaker, an endpoint at
    /// its concurrency cap). Their deliveries stay exactly as they were: due, no attempt
    /// spent.
    pub fn exclude_endpoints(mut self, endpoints: impl IntoIterator<Item = EndpointId>) -> Self {
        self.exclude_endpoints.extend(endpoints);
        self
    }

    /// Take at most `n` (at least 1) webhook deliveries to any one endpoint: a worker that may
    /// start only `n` requests to an endpoint at once claims no more than it can start
    /// (`claim_takes_no_more_than_an_endpoint_has_room_for`). An endpoint named by
    /// [`ClaimRequest::endpoint_room`] gets that room instead.
    pub fn endpoint_limit(mut self, n: u32) -> Self {
        self.endpoint_limit = Some(n);
        self
    }

    /// Take at most `n` webhook deliveries to `endpoint` (its cap less what the worker has
    /// in flight to it); overrides [`ClaimRequest::endpoint_limit`] for that endpoint. A room
    /// of 0 excludes the endpoint, as [`ClaimRequest::exclude_endpoints`] does.
    pub fn endpoint_room(mut self, endpoint: EndpointId, n: u32) -> Self {
        if n == 0 {
            self.exclude_endpoints.insert(endpoint);
        } else {
            self.endpoint_room.insert(endpoint, n);
        }
        self
    }

    /// Older unfinished deliveries of these topics do not hold back newer ones with the same
    /// ordering key (an abandoned producer's rows).
    pub fn dormant_topics(mut self, topics: impl IntoIterator<Item = Topic>) -> Self {
        self.dormant_topics.extend(topics);
        self
    }

    /// Check the request; every store calls this first.
    pub fn validate(&self) -> Result<()> {
        if self.sources.is_empty() {
            return Err(Error::invalid_input(
                "sources",
                "a claim must name what it serves; an empty allowlist is refused",
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.batch_size) {
            return Err(Error::invalid_input("batch_size", "must be from 1 to 1000"));
        }
        if self.endpoint_limit == Some(0) {
            return Err(Error::invalid_input(
                "endpoint_limit",
                "must be at least 1; exclude endpoints to take none",
            ));
        }
        if self.lease < Duration::from_secs(1) || self.lease > Duration::from_secs(24 * 3600) {
            return Err(Error::invalid_input("lease", "must be from 1 s to 24 h"));
        }
        for s in &self.sources {
            let m = match s {
                ClaimSource::Handler { max_attempts, .. }
                | ClaimSource::Webhooks { max_attempts }
                | ClaimSource::Email { max_attempts } => *max_attempts,
            };
            if !(1..=1000).contains(&m) {
                return Err(Error::invalid_input(
                    "max_attempts",
                    "must be from 1 to 1000",
                ));
            }
        }
        Ok(())
    }

    /// The batch size.
    pub fn batch_size(&self) -> u32 {
        self.batch_size
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The sources.
    pub fn sources(&self) -> &[ClaimSource] {
        &self.sources
    }

    /// Excluded endpoints.
    pub fn excluded_endpoints(&self) -> &BTreeSet<EndpointId> {
        &self.exclude_endpoints
    }

    /// The most webhook deliveries to any endpoint not named by
    /// [`ClaimRequest::endpoint_room`] that one claim takes (`None`: no limit).
    pub fn default_endpoint_limit(&self) -> Option<u32> {
        self.endpoint_limit
    }

    /// The endpoints with a room of their own (each at least 1; a room of 0 is an exclusion).
    pub fn endpoint_rooms(&self) -> &BTreeMap<EndpointId, u32> {
        &self.endpoint_room
    }

    /// The most webhook deliveries to `endpoint` this claim takes: its room, else the
    /// default limit; `None` when unlimited (an excluded endpoint is not served at all, see
    /// [`ClaimRequest::serves`]).
    pub fn room_for(&self, endpoint: &EndpointId) -> Option<u32> {
        self.endpoint_room
            .get(endpoint)
            .copied()
            .or(self.endpoint_limit)
    }

    /// The most deliveries to `destination` this claim takes (`usize::MAX`: no limit).
    pub fn group_limit(&self, destination: &Destination) -> usize {
        match destination {
            Destination::Webhook(e) => self.room_for(e).map_or(usize::MAX, |n| n as usize),
            _ => usize::MAX,
        }
    }

    /// Dormant topics.
    pub fn dormant(&self) -> &BTreeSet<Topic> {
        &self.dormant_topics
    }

    /// Whether webhook deliveries are served, and their budget.
    pub fn webhook_budget(&self) -> Option<u32> {
        self.sources.iter().find_map(|s| match s {
            ClaimSource::Webhooks { max_attempts } => Some(*max_attempts),
            _ => None,
        })
    }

    /// Whether e-mail deliveries are served, and their budget.
    pub fn email_budget(&self) -> Option<u32> {
        self.sources.iter().find_map(|s| match s {
            ClaimSource::Email { max_attempts } => Some(*max_attempts),
            _ => None,
        })
    }

    /// The consumers served, with their budgets.
    pub fn consumers(&self) -> impl Iterator<Item = (&ConsumerName, u32)> {
        self.sources.iter().filter_map(|s| match s {
            ClaimSource::Handler {
                consumer,
                max_attempts,
            } => Some((consumer, *max_attempts)),
            _ => None,
        })
    }

    /// The budget for a delivery to `destination`, or `None` when this claim does not serve
    /// it.
    pub fn budget_for(&self, destination: &Destination) -> Option<u32> {
        match destination {
            Destination::Handler(c) => self.consumers().find(|(n, _)| *n == c).map(|(_, m)| m),
            Destination::Webhook(_) => self.webhook_budget(),
            Destination::Email(_) => self.email_budget(),
        }
    }

    /// Whether this claim takes a delivery to `destination` at all (served and not an
    /// excluded endpoint).
    pub fn serves(&self, destination: &Destination) -> bool {
        self.budget_for(destination).is_some()
            && !matches!(destination, Destination::Webhook(e) if self.exclude_endpoints.contains(e))
    }
}

/// The right to act on one claimed delivery. Every later call names it; a call whose token
/// no longer matches changes nothing and fails with `LeaseLost`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The delivery.
    pub delivery_id: DeliveryId,
    /// Its tenant.
    pub tenant: TenantId,
    /// The fencing token.
    pub token: ClaimToken,
    /// When the lease ends.
    pub until: Timestamp,
    /// Attempts spent, as set by this claim.
    pub attempts: u32,
    /// Snoozes taken before this claim.
    pub snoozes: u32,
    /// The status the delivery was claimed from: `pending`, `held` (a free probe),
    /// `processing` (a stranded claim) or `sending` (a stranded e-mail send).
    pub claimed_from: DeliveryStatus,
}

/// What a store writes to a delivery row when a claim ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryUpdate {
    /// The new status.
    pub status: DeliveryStatus,
    /// Attempts spent.
    pub attempts: u32,
    /// Snoozes taken.
    pub snoozes: u32,
    /// When it is next due.
    pub next_attempt_at: Timestamp,
    /// Set when the delivery is finished.
    pub completed_at: Option<Timestamp>,
    /// Set when dead.
    pub dead_reason: Option<DeadReason>,
    /// The new last outcome; `None` keeps the current one.
    pub last_outcome: Option<LastOutcome>,
    /// Disable the delivery's endpoint with reason `gone` (a 410).
    pub disable_endpoint: bool,
    /// The delivery waits for its endpoint ([`Verdict::AwaitEndpoint`]). A store that finds
    /// the endpoint active again, or gone, when it writes the row writes
    /// [`DeliveryUpdate::endpoint_is_back`] instead: a resume or delete that happened while
    /// the delivery was claimed did not see it, and it must not wait for good.
    pub awaits_endpoint: bool,
}

impl DeliveryUpdate {
    /// The row when the endpoint it would wait for is active again or gone: `pending`,
    /// due `now` (a gone endpoint's delivery then dies as `endpoint-removed` at its claim).
    pub fn endpoint_is_back(&mut self, now: Timestamp) {
        if self.awaits_endpoint {
            self.status = DeliveryStatus::Pending;
            self.next_attempt_at = now;
            self.awaits_endpoint = false;
        }
    }
}

impl Lease {
    /// Whether this claim probes a held delivery (it spent no attempt).
    pub fn is_probe(&self) -> bool {
        self.claimed_from == DeliveryStatus::Held
    }

    /// Whether this claim took a delivery whose e-mail send may have happened (a crash
    /// after `mark_sending`).
    pub fn was_sending(&self) -> bool {
        self.claimed_from == DeliveryStatus::Sending
    }

    fn refunded_attempts(&self) -> u32 {
        if self.is_probe() {
            self.attempts
        } else {
            self.attempts.saturating_sub(1)
        }
    }

    /// The row after `verdict` (see [`crate::verdict`]), recorded at `now`.
    pub fn settle(
        &self,
        verdict: &Verdict,
        record: Option<&AttemptRecord>,
        now: Timestamp,
    ) -> DeliveryUpdate {
        let attempts = if verdict.refunds_attempt() {
            self.refunded_attempts()
        } else {
            self.attempts
        };
        let mut u = DeliveryUpdate {
            status: DeliveryStatus::Pending,
            attempts,
            snoozes: self.snoozes,
            next_attempt_at: now,
            completed_at: None,
            dead_reason: None,
            last_outcome: record.map(LastOutcome::from),
            disable_endpoint: false,
            awaits_endpoint: false,
        };
        match verdict {
            Verdict::Succeeded => {
                u.status = DeliveryStatus::Succeeded;
                u.completed_at = Some(now);
            }
            Verdict::Retry { at } => u.next_attempt_at = *at,
            Verdict::Held { probe_at } => {
                u.status = DeliveryStatus::Held;
                u.next_attempt_at = *probe_at;
            }
            Verdict::Dead { reason } => {
                u.status = DeliveryStatus::Dead;
                u.completed_at = Some(now);
                u.dead_reason = Some(*reason);
                u.disable_endpoint = *reason == DeadReason::Gone;
            }
            Verdict::Snoozed { until } => {
                u.next_attempt_at = *until;
                u.snoozes = self.snoozes.saturating_add(1);
            }
            Verdict::Parked { until } => u.next_attempt_at = *until,
            Verdict::AwaitEndpoint { until } => {
                u.status = DeliveryStatus::Held;
                u.next_attempt_at = *until;
                u.awaits_endpoint = true;
            }
        }
        u
    }

    /// The row after a release: back where it was claimed from, due after `delay`, the
    /// attempt refunded. A stranded claim goes back to `pending`; a stranded send stays
    /// `sending` so the next claim still knows it may have been sent.
    pub fn release(&self, delay: Duration, now: Timestamp) -> DeliveryUpdate {
        let status = match self.claimed_from {
            DeliveryStatus::Held => DeliveryStatus::Held,
            DeliveryStatus::Sending => DeliveryStatus::Sending,
            _ => DeliveryStatus::Pending,
        };
        DeliveryUpdate {
            status,
            attempts: self.refunded_attempts(),
            snoozes: self.snoozes,
            next_attempt_at: now.saturating_add(delay),
            completed_at: None,
            dead_reason: None,
            last_outcome: None,
            disable_endpoint: false,
            awaits_endpoint: false,
        }
    }
}

/// One claimed delivery with its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The lease to name in every later call.
    pub lease: Lease,
    /// The delivery as it is now (`processing`).
    pub delivery: Delivery,
    /// Its message.
    pub message: Message,
}

/// A verdict with the attempt that led to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// What to do with the delivery.
    pub verdict: Verdict,
    /// The attempt to append to the ledger (`None` when nothing was tried).
    pub attempt: Option<AttemptRecord>,
}

/// The result of a release.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReleaseReport {
    /// Deliveries put back.
    pub released: u32,
    /// Leases that no longer matched (changed nothing).
    pub lost: u32,
}

#[cfg(test)]
#[path = "claim_tests.rs"]
mod tests;
