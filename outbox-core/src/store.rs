//! The store traits and the values they exchange. Each `# Contract` line names
//! the conformance case in `outboxkit_testing::conformance` that checks it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::claim::{ClaimRequest, Claimed, Completion, Lease, ReleaseReport};
use crate::endpoint::{Consumer, Endpoint, EndpointUpdate};
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{ConsumerName, DeliveryId, EndpointId, MessageId, OrderingKey, TenantId, Topic};
use crate::model::{Attempt, Delivery, DeliveryStatus, DestinationKind, Message, NewMessage};
use crate::retention::RetentionCutoffs;
use crate::time::Timestamp;
use crate::wake::WakeListener;

/// The result of one enqueue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The message's id (the first message's id for a duplicate).
    pub message_id: MessageId,
    /// Deliveries written (0 for a duplicate).
    pub deliveries: u32,
    /// Whether an earlier message had the same `(tenant, topic, idempotency key)`.
    pub duplicate: bool,
}

/// Delivery counts by status, and how late the queue is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// `pending` deliveries.
    pub pending: u64,
    /// `processing` deliveries.
    pub processing: u64,
    /// `sending` deliveries.
    pub sending: u64,
    /// `succeeded` deliveries.
    pub succeeded: u64,
    /// `held` deliveries.
    pub held: u64,
    /// `dead` deliveries.
    pub dead: u64,
    /// The earliest `next_attempt_at` among claimable deliveries that are due now.
    pub oldest_due_at: Option<Timestamp>,
    /// How long that delivery has been due (`now - oldest_due_at`).
    pub oldest_due_age: Option<Duration>,
}

impl Stats {
    /// The count for one status.
    pub fn count(&self, status: DeliveryStatus) -> u64 {
        match status {
            DeliveryStatus::Pending => self.pending,
            DeliveryStatus::Processing => self.processing,
            DeliveryStatus::Sending => self.sending,
            DeliveryStatus::Succeeded => self.succeeded,
            DeliveryStatus::Held => self.held,
            DeliveryStatus::Dead => self.dead,
        }
    }

    /// Add one to a status's count.
    pub fn add(&mut self, status: DeliveryStatus, n: u64) {
        let c = match status {
            DeliveryStatus::Pending => &mut self.pending,
            DeliveryStatus::Processing => &mut self.processing,
            DeliveryStatus::Sending => &mut self.sending,
            DeliveryStatus::Succeeded => &mut self.succeeded,
            DeliveryStatus::Held => &mut self.held,
            DeliveryStatus::Dead => &mut self.dead,
        };
        *c += n;
    }

    /// Every delivery.
    pub fn total(&self) -> u64 {
        DeliveryStatus::ALL.iter().map(|s| self.count(*s)).sum()
    }

    /// These counts without the finished ones (`succeeded` and `dead` set to 0): what
    /// [`DeliveryStore::queue_stats`] answers.
    pub fn unfinished(self) -> Stats {
        Stats {
            succeeded: 0,
            dead: 0,
            ..self
        }
    }
}

/// One tenant's delivery counts, as [`Ledger::tenants`] lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStats {
    /// The tenant.
    pub tenant: TenantId,
    /// Its counts (what [`DeliveryStore::tenant_stats`] answers for it).
    pub stats: Stats,
    /// Its messages not yet purged (with or without deliveries).
    pub messages: u64,
}

/// The longest free-text filter accepted.
pub const MAX_FILTER_TEXT: usize = 200;

/// Filters for [`Ledger::list_deliveries`]; every set field must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryFilter {
    /// Only this status.
    pub status: Option<DeliveryStatus>,
    /// Only deliveries to this endpoint.
    pub endpoint: Option<EndpointId>,
    /// Only deliveries to this consumer.
    pub consumer: Option<ConsumerName>,
    /// Only this destination kind.
    pub kind: Option<DestinationKind>,
    /// Only this topic.
    pub topic: Option<Topic>,
    /// Only deliveries created at or after this time.
    pub since: Option<Timestamp>,
    /// Only deliveries created before this time.
    pub until: Option<Timestamp>,
    /// Only deliveries whose message has this ordering key (the subject).
    pub ordering_key: Option<OrderingKey>,
    /// Only deliveries with a stored excerpt (any attempt's, or the last outcome's) that
    /// contains this text, ignoring ASCII case (1–200 bytes).
    pub text: Option<String>,
}

impl DeliveryFilter {
    /// Check the free text; every store calls this first.
    pub fn validate(&self) -> Result<()> {
        if let Some(t) = &self.text {
            if t.is_empty() || t.len() > MAX_FILTER_TEXT {
                return Err(Error::invalid_input("text", "must be 1 to 200 bytes"));
            }
        }
        Ok(())
    }

    /// Whether one excerpt contains the text filter, ignoring ASCII case (`true` without a
    /// text filter).
    pub fn text_in(&self, excerpt: &str) -> bool {
        match &self.text {
            None => true,
            Some(t) => excerpt
                .to_ascii_lowercase()
                .contains(&t.to_ascii_lowercase()),
        }
    }

    /// Whether `d`, with its ledger `attempts`, passes: [`DeliveryFilter::matches`] and the
    /// text filter over every stored excerpt.
    pub fn matches_with_attempts(&self, d: &Delivery, attempts: &[Attempt]) -> bool {
        self.matches(d)
            && (self.text.is_none()
                || d.last_outcome
                    .as_ref()
                    .and_then(|o| o.excerpt.as_deref())
                    .is_some_and(|e| self.text_in(e))
                || attempts
                    .iter()
                    .filter_map(|a| a.record.excerpt.as_deref())
                    .any(|e| self.text_in(e)))
    }

    /// Whether `d` passes every filter but the text one (the in-memory semantics every
    /// store reproduces).
    pub fn matches(&self, d: &Delivery) -> bool {
        self.status.is_none_or(|s| d.status == s)
            && self
                .endpoint
                .is_none_or(|e| d.destination.endpoint() == Some(e))
            && self
                .consumer
                .as_ref()
                .is_none_or(|c| d.destination == crate::Destination::Handler(c.clone()))
            && self.kind.is_none_or(|k| d.destination.kind() == k)
            && self.topic.as_ref().is_none_or(|t| &d.topic == t)
            && self.since.is_none_or(|s| d.created_at >= s)
            && self.until.is_none_or(|u| d.created_at < u)
            && self
                .ordering_key
                .as_ref()
                .is_none_or(|k| d.ordering_key.as_ref() == Some(k))
    }
}

/// A position in a newest-first listing: the last item's `(created_at, id)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// The last item's creation time.
    pub created_at: Timestamp,
    /// The last item's id.
    pub id: DeliveryId,
}

impl Cursor {
    /// The cursor after `d`.
    pub fn after(d: &Delivery) -> Self {
        Cursor {
            created_at: d.created_at,
            id: d.id,
        }
    }

    /// Whether `d` comes after this cursor in newest-first order.
    pub fn precedes(&self, d: &Delivery) -> bool {
        (d.created_at, d.id) < (self.created_at, self.id)
    }

    /// The opaque text form.
    pub fn encode(&self) -> String {
        format!(
            "{}.{}",
            self.created_at.as_unix_millis(),
            self.id.as_uuid().simple()
        )
    }

    /// Parse [`Cursor::encode`].
    pub fn decode(s: &str) -> Result<Self> {
        let bad = || Error::invalid_input("cursor", "is not a cursor returned by this library");
        let (ms, id) = s.split_once('.').ok_or_else(bad)?;
        let ms: i64 = ms.parse().map_err(|_| bad())?;
        Ok(Cursor {
            created_at: Timestamp::from_unix_millis(ms).map_err(|_| bad())?,
            id: DeliveryId::parse(id).map_err(|_| bad())?,
        })
    }
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The items, newest first.
    pub items: Vec<T>,
    /// Where the next page starts; `None` when there is no more.
    pub next: Option<Cursor>,
}

/// Which page to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRequest {
    /// At most this many items (1–1000).
    pub limit: u32,
    /// Start after this cursor.
    pub cursor: Option<Cursor>,
}

impl PageRequest {
    /// The first page of `limit` items.
    pub fn first(limit: u32) -> Self {
        PageRequest {
            limit,
            cursor: None,
        }
    }

    /// Check the limit.
    pub fn validate(&self) -> Result<()> {
        if !(1..=1000).contains(&self.limit) {
            return Err(Error::invalid_input("limit", "must be from 1 to 1000"));
        }
        Ok(())
    }
}

/// The result of one retention pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeReport {
    /// Deliveries removed (with their attempts).
    pub deliveries: u64,
    /// Messages removed (those left without deliveries).
    pub messages: u64,
    /// The tenant this pass served, when any had something to purge.
    pub tenant: Option<TenantId>,
}

/// Claims, completes and releases deliveries.
///
/// # Contract
/// - `claim` MUST refuse a request that names no source with `InvalidInput` and change
///   nothing (`empty_allowlist_is_refused`).
/// - `claim` MUST take only due deliveries (`pending` or `held` with `next_attempt_at <= now`,
///   or `processing`/`sending` whose lease ended), served by the request and not excluded,
///   oldest first by `(next_attempt_at, enqueue order)`, at most `batch_size`
///   (`claim_takes_due_oldest_first_up_to_batch`, `delayed_message_appears_when_due`).
/// - A claimed delivery becomes `processing` with a fresh token and
///   `lease_until = next_attempt_at = now + lease`; `attempts + 1` unless claimed from `held`
///   (`held_probe_spends_no_attempt`, `stranded_claim_is_claimable_after_lease`).
/// - Concurrent claims MUST never hand out one delivery twice while its lease is live
///   (`claim_is_exclusive`).
/// - Deliveries at or past their source's budget MUST be moved to `dead` (`max_attempts`) at
///   claim time and never returned (`exhausted_rows_die_at_claim`).
/// - A delivery with an ordering key MUST NOT be claimed while an older unfinished delivery
///   of the same tenant, destination and key exists whose topic is not dormant
///   (`ordering_key_is_fifo_per_destination`, `dormant_topic_does_not_block`).
/// - `complete`, `release`, `extend` and `mark_sending` with a token that no longer matches
///   MUST change nothing and fail with `LeaseLost` (`stale_token_is_fenced`); so MUST a lease
///   whose tenant is not the delivery's (`forged_tenant_lease_is_fenced`).
/// - `complete` MUST write [`Lease::settle`], append the attempt to the ledger, and disable
///   the endpoint on `Dead { Gone }` in one atomic step (`verdict_*` cases).
/// - Deliveries to a paused or disabled endpoint are `held` for it (due at
///   [`crate::EndpointStatus::hold_until`]: never while paused), so `claim` does not take them
///   until the endpoint is resumed, and takes a disabled endpoint's only when its hold expires
///   (`paused_endpoint_holds_then_resumes_in_order`, `disabled_endpoint_holds_until_reenabled`,
///   `disabled_endpoint_hold_expires`). `complete` with [`crate::Verdict::AwaitEndpoint`] MUST
///   write [`crate::DeliveryUpdate::endpoint_is_back`] when the endpoint is active or gone by
///   then (`await_endpoint_after_resume_is_pending`).
/// - `reset` MUST give only a `held` delivery a fresh budget, due now; else `Conflict`, and
///   `NotFound` across tenants (`reset_held_gives_fresh_budget`).
#[async_trait]
pub trait DeliveryStore: Send + Sync + fmt::Debug + 'static {
    /// Take up to `batch_size` due deliveries.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>>;

    /// End many claims; one result per item, in order. The outer error means nothing is
    /// known to have been written. The dispatcher completes through this call only.
    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>>;

    /// End one claim with a verdict: [`DeliveryStore::complete_many`] of one item, unless a
    /// store has a cheaper single-row path.
    async fn complete(&self, lease: &Lease, completion: &Completion) -> Result<()> {
        let mut out = self
            .complete_many(&[(lease.clone(), completion.clone())])
            .await?;
        out.pop().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Unexpected,
                "complete_many returned no result",
            ))
        })
    }

    /// Put unstarted claims back ([`Lease::release`]), due after `delay`.
    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport>;

    /// Extend a lease to `now + by` (a heartbeat); returns the lease with its new end.
    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease>;

    /// Mark an e-mail delivery `sending` just before the send (so a crash mid-send is never retried blind).
    async fn mark_sending(&self, lease: &Lease) -> Result<()>;

    /// Make every `held` delivery of the endpoint `pending` and due now; returns how many.
    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64>;

    /// Give a `dead` delivery a fresh budget, due now. Any other status is a `Conflict`;
    /// another tenant's delivery is `NotFound`.
    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()>;

    /// Make a `pending` or `held` delivery due now (as `pending`), keeping its attempts.
    /// Any other status is a `Conflict`.
    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()>;

    /// Reset a `held` delivery by hand to a fresh budget (seed 000 `retryDelivery`): it
    /// becomes `pending`, due now, with attempts and snoozes 0; its ledger is kept. Any other
    /// status is a `Conflict`; another tenant's delivery is `NotFound`.
    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()>;

    /// Counts by status and the age of the oldest due delivery.
    async fn stats(&self) -> Result<Stats>;

    /// The unfinished part of [`DeliveryStore::stats`], for gauges read at every scrape:
    /// the `pending`, `processing`, `sending` and `held` counts and the oldest due delivery,
    /// with `succeeded` and `dead` left at 0 (not counted).
    ///
    /// # Contract
    /// - It MUST equal `stats()` with `succeeded` and `dead` set to 0
    ///   (`queue_stats_are_the_unfinished_part_of_stats`).
    /// - Its cost SHOULD grow with the unfinished deliveries only, never with the finished
    ///   history kept for the ledger: a scrape of a store holding millions of finished
    ///   deliveries stays as cheap as one of an empty store.
    async fn queue_stats(&self) -> Result<Stats>;

    /// [`DeliveryStore::stats`] over one tenant's deliveries only, and only those to
    /// `endpoint` when given (an endpoint of another tenant counts nothing).
    async fn tenant_stats(&self, tenant: &TenantId, endpoint: Option<EndpointId>) -> Result<Stats>;

    /// A listener woken when work may have arrived (an enqueue, a release); `None` when the
    /// store cannot tell and dispatchers rely on polling.
    fn wake_listener(&self) -> Option<WakeListener> {
        None
    }
}

/// Writes messages and their fan-out.
///
/// # Contract
/// - `enqueue` MUST validate the message and write nothing on any error
///   (`invalid_message_writes_nothing`).
/// - It MUST write the message and one `pending` delivery per matching consumer, per
///   matching endpoint of the tenant, per e-mail recipient, atomically (`fan_out_at_enqueue`);
///   a paused or disabled endpoint's delivery is written `held` for it
///   ([`crate::fanout::hold_for_endpoints`], `paused_endpoint_holds_then_resumes_in_order`).
/// - A message with the `(tenant, topic, idempotency key)` of an earlier one MUST write
///   nothing and return the earlier id with `duplicate: true` (`idempotent_enqueue`).
/// - `enqueue_batch` MUST validate every message before writing any
///   (`batch_enqueue_is_all_or_nothing`).
/// - A message read back (`get_message`, `claim`) MUST equal what was enqueued, payload byte
///   for byte, at every limit's edge (`messages_round_trip_byte_for_byte`).
#[async_trait]
pub trait MessageStore: Send + Sync + fmt::Debug + 'static {
    /// Write one message and its deliveries in a transaction of its own.
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued>;

    /// Write many messages in one transaction.
    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>>;
}

/// Webhook endpoints and in-process consumers.
///
/// # Contract
/// - Every read and write is scoped by tenant; another tenant's endpoint is `NotFound`
///   (`tenant_isolation_of_endpoints`).
/// - `update_endpoint` with a new URL or secret, or a status set to active, MUST release the
///   endpoint's held deliveries in the same step (`secret_rotation_releases_held`,
///   `paused_endpoint_holds_then_resumes_in_order`); one that pauses or disables it MUST make
///   its `pending` and `held` deliveries `held` until [`EndpointUpdate::holds_until`] in the
///   same step (`pause_holds_queued_deliveries`). Releasing is decided by
///   [`EndpointUpdate::releases_held`] on the status after the update: a new URL or secret
///   of a paused or disabled endpoint MUST leave its waiting deliveries and their hold as
///   they were (`rotating_a_waiting_endpoints_secret_keeps_its_hold`).
/// - `delete_endpoint` MUST make the endpoint's held deliveries `pending`, due now, so the
///   next claim ends them as `endpoint-removed` (`deleted_endpoint_gets_nothing`).
/// - `create_endpoint` with an id that exists MUST fail with `Conflict`.
/// - An endpoint read back MUST equal what was written; a description or rate limit out of
///   range MUST be `InvalidInput` and write nothing (`endpoints_round_trip`).
#[async_trait]
pub trait EndpointStore: Send + Sync + fmt::Debug + 'static {
    /// Store a new endpoint.
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()>;
    /// Read one.
    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint>;
    /// Every endpoint of a tenant, oldest first.
    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>>;
    /// Change one; returns it as stored.
    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> Result<Endpoint>;
    /// Remove one (its pending and held deliveries become due and die as
    /// `endpoint-removed` when next claimed).
    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()>;
    /// Register or update a consumer (upsert by name).
    async fn put_consumer(&self, consumer: &Consumer) -> Result<()>;
    /// Every consumer, by name.
    async fn list_consumers(&self) -> Result<Vec<Consumer>>;
    /// Remove a consumer (its deliveries stay; no new ones fan out to it).
    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()>;
}

/// What an operator reads, and retention.
///
/// # Contract
/// - Listings are newest first by `(created_at, id)`, filtered, paged with a stable cursor
///   (`ledger_lists_newest_first_with_stable_cursor`, `ledger_filters`).
/// - `attempts` are in order with outcome, status, bounded excerpt (`ledger_records_attempts`),
///   each record as completed (`attempts_round_trip`).
/// - `purge_completed` removes only `succeeded`/`dead` deliveries completed before the
///   cutoff, at most `limit` per call, one tenant per call in rotation
///   (`purge_rotates_over_tenants`).
/// - `purge_expired` applies each tenant's own cutoff and still rotates over every tenant
///   (`purge_honours_tenant_windows`, `purge_rotation_visits_every_tenant_with_windows`).
/// - `purge_tenant` touches only the named tenant and leaves the rotation alone
///   (`purge_tenant_touches_only_its_tenant`).
/// - Attempts carry their run, scheduled time and payload fingerprint; `replay` starts a
///   new run and keeps the earlier attempts (`replay_starts_a_new_run`,
///   `ledger_records_schedule_and_payload`).
/// - `list_deliveries` filters by ordering key and by text over the stored excerpts
///   (`ledger_filters_by_ordering_key_and_text`).
/// - `tenants` lists every tenant with deliveries or messages and its counts
///   (`tenants_are_listed_with_counts`); `tenant_stats` counts only that tenant (and
///   endpoint) (`stats_are_scoped_by_tenant_and_endpoint`).
#[async_trait]
pub trait Ledger: Send + Sync + fmt::Debug + 'static {
    /// A page of a tenant's deliveries.
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>>;
    /// One delivery.
    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery>;
    /// One message.
    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message>;
    /// A delivery's attempts, oldest first.
    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>>;
    /// Remove finished deliveries completed before `before` (at most `limit`, 1–10000),
    /// and messages left without deliveries created before `before`, for one tenant in
    /// rotation: [`Ledger::purge_expired`] with one cutoff for every tenant.
    async fn purge_completed(&self, before: Timestamp, limit: u32) -> Result<PurgeReport> {
        self.purge_expired(&RetentionCutoffs::uniform(before), limit)
            .await
    }
    /// One rotating retention pass with a cutoff per tenant
    /// ([`crate::RetentionPolicy::cutoffs`]): serves the next tenant (after the stored
    /// rotation cursor, wrapping) that has something expired under its own cutoff.
    async fn purge_expired(&self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport>;
    /// Remove `tenant`'s finished deliveries completed before `before` (at most `limit`)
    /// with their attempts, then its messages created before `before` left without
    /// deliveries. Touches no other tenant and does not move the rotation cursor.
    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport>;
    /// Every tenant that has deliveries or messages, by name, with its counts.
    async fn tenants(&self) -> Result<Vec<TenantStats>>;
}

/// Everything a backend provides.
pub trait Store: DeliveryStore + MessageStore + EndpointStore + Ledger {}

impl<T: DeliveryStore + MessageStore + EndpointStore + Ledger + ?Sized> Store for T {}

/// `dyn DeliveryStore`.
pub type DynDeliveryStore = dyn DeliveryStore;
/// `dyn MessageStore`.
pub type DynMessageStore = dyn MessageStore;
/// `dyn EndpointStore`.
pub type DynEndpointStore = dyn EndpointStore;
/// `dyn Ledger`.
pub type DynLedger = dyn Ledger;
/// `dyn Store`.
pub type DynStore = dyn Store;

mod forward;

/// Check a purge limit (1–10000).
pub fn check_purge_limit(limit: u32) -> Result<()> {
    if !(1..=10_000).contains(&limit) {
        return Err(Error::invalid_input("limit", "must be from 1 to 10000"));
    }
    Ok(())
}
