//! The store traits and the values they exchange. Each `# Contract` line names
//! the conformance case in `outboxkit_testing::conformance` that checks it.
//!
//! The traits are split by caller, one module each: [`DeliveryStore`] (the dispatcher's hot
//! path, in `store/delivery.rs`), [`OperatorStore`] (the operator's calls and counts,
//! `store/operator.rs`), [`MessageStore`] (`store/message.rs`), [`EndpointStore`]
//! (`store/endpoint.rs`) and [`Ledger`] (`store/ledger.rs`). Conveniences live in the blanket
//! [`DeliveryStoreExt`] and [`LedgerExt`], which nobody implements. `Arc<T>` and `Box<T>`
//! forward every trait (`store/forward.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{ConsumerName, DeliveryId, EndpointId, MessageId, OrderingKey, TenantId, Topic};
use crate::model::{Attempt, Delivery, DeliveryStatus, DestinationKind};
use crate::time::Timestamp;

mod delivery;
mod endpoint;
mod event_types;
mod forward;
mod ledger;
mod message;
mod operator;

pub use delivery::{DeliveryStore, DeliveryStoreExt};
pub use endpoint::EndpointStore;
pub use event_types::EventTypeStore;
pub use ledger::{Ledger, LedgerExt};
pub use message::MessageStore;
pub use operator::OperatorStore;

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
    /// [`OperatorStore::queue_stats`] answers.
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
    /// Its counts (what [`OperatorStore::tenant_stats`] answers for it).
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

/// What [`OperatorStore::cancel_message`] did to one message's deliveries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CancelReport {
    /// Deliveries that were `pending` or `held` and are now `dead` (`cancelled`).
    pub cancelled: u64,
    /// Deliveries left as they were: in flight (`processing`, `sending`) or already
    /// finished (`succeeded`, `dead`).
    pub skipped: u64,
}

/// Everything a backend provides: the hot path, the operator's calls, messages, endpoints,
/// the ledger and the event-type catalogue (the admin API's tokens are a separate
/// [`crate::TokenStore`]).
pub trait Store:
    DeliveryStore + OperatorStore + MessageStore + EndpointStore + Ledger + EventTypeStore
{
}

impl<
        T: DeliveryStore
            + OperatorStore
            + MessageStore
            + EndpointStore
            + Ledger
            + EventTypeStore
            + ?Sized,
    > Store for T
{
}

/// `dyn DeliveryStore`.
pub type DynDeliveryStore = dyn DeliveryStore;
/// `dyn OperatorStore`.
pub type DynOperatorStore = dyn OperatorStore;
/// `dyn MessageStore`.
pub type DynMessageStore = dyn MessageStore;
/// `dyn EndpointStore`.
pub type DynEndpointStore = dyn EndpointStore;
/// `dyn Ledger`.
pub type DynLedger = dyn Ledger;
/// `dyn EventTypeStore`.
pub type DynEventTypeStore = dyn EventTypeStore;
/// `dyn Store`.
pub type DynStore = dyn Store;

/// Check a purge limit (1–10000).
pub fn check_purge_limit(limit: u32) -> Result<()> {
    if !(1..=10_000).contains(&limit) {
        return Err(Error::invalid_input("limit", "must be from 1 to 10000"));
    }
    Ok(())
}
