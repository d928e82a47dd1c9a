//! The data of an [`super::InMemoryStore`], its row bookkeeping and the enqueue, as plain
//! synchronous code run under the store's lock. The other operations on [`State`] sit beside
//! the trait that calls them (`claim.rs`, `deliveries.rs`, `endpoints.rs`, `ledger.rs`). Row
//! changes come from `outboxkit_core` (`fanout`, `Lease::settle`, `Lease::release`); this
//! code only selects rows and writes them.

use foldhash::HashMap;
use std::collections::{BTreeMap, BTreeSet};

use outboxkit_core::{
    fanout, Attempt, ClaimToken, Consumer, ConsumerName, Delivery, DeliveryId, DeliveryStatus,
    DeliveryUpdate, Destination, Endpoint, EndpointId, Enqueued, Entropy, Error, IdempotencyKey,
    Message, MessageId, OrderingKey, PayloadFingerprint, PermitLog, Result, TenantId, Timestamp,
    Topic, ValidMessage,
};

/// One delivery with what the public type does not carry: its enqueue sequence and the
/// token of its current claim.
pub(super) struct Row {
    pub(super) d: Delivery,
    pub(super) seq: u64,
    pub(super) token: Option<ClaimToken>,
    /// When the current claim's attempt was due (the ledger's `scheduled_at`).
    pub(super) due_at: Option<Timestamp>,
    /// Its barrier key (core's `barrier_key`, fixed at fan-out and at a replay).
    pub(super) barrier: Option<String>,
}

type OrderingSlot = (TenantId, Destination, String);

/// A claim group: a tenant and a destination.
pub(super) type Group = (TenantId, Destination);

/// The claimable rows of each group, by `(next_attempt_at, seq)`.
type Groups = HashMap<Group, BTreeSet<(Timestamp, u64, DeliveryId)>>;

/// Everything the store holds.
#[derive(Default)]
pub(super) struct State {
    pub(super) messages: HashMap<MessageId, Message>,
    pub(super) idempotency: HashMap<(TenantId, Topic, IdempotencyKey), MessageId>,
    pub(super) rows: HashMap<DeliveryId, Row>,
    /// Claimable rows (pending, held, processing, sending) by `(next_attempt_at, seq)`.
    pub(super) due: BTreeSet<(Timestamp, u64, DeliveryId)>,
    /// The same rows per claim group, so a fair claim reads each group from its head.
    pub(super) groups: Groups,
    /// Unfinished rows with an ordering key, by slot and sequence.
    pub(super) ordered: HashMap<OrderingSlot, BTreeMap<u64, DeliveryId>>,
    /// Claimable, not-held rows that have spent attempts, by attempts: the only rows the
    /// exhausted-row pass of a claim needs to look at.
    pub(super) spent: BTreeSet<(u32, DeliveryId)>,
    /// The ledger of each delivery, without the payload's fingerprint: a message's payload
    /// never changes, so it is derived from the message when the ledger is read (as the
    /// SQL stores and Redis do), not hashed on every completion.
    pub(super) attempts: HashMap<DeliveryId, Vec<Attempt>>,
    pub(super) endpoints: HashMap<EndpointId, Endpoint>,
    pub(super) consumers: BTreeMap<ConsumerName, Consumer>,
    pub(super) next_seq: u64,
    /// Rate-limit permits granted in the last second, per tenant and endpoint.
    pub(super) permits: HashMap<(TenantId, EndpointId), PermitLog>,
    pub(super) purge_cursor: Option<TenantId>,
}

/// What an attempt holds for its payload's fingerprint until the ledger is read.
pub(super) fn unread_fingerprint() -> PayloadFingerprint {
    PayloadFingerprint {
        size: 0,
        sha256: String::new(),
    }
}

pub(super) fn claimable(s: DeliveryStatus) -> bool {
    matches!(
        s,
        DeliveryStatus::Pending
            | DeliveryStatus::Held
            | DeliveryStatus::Processing
            | DeliveryStatus::Sending
    )
}

pub(super) fn slot(r: &Row) -> Option<OrderingSlot> {
    let key = r.barrier.as_ref()?;
    Some((r.d.tenant.clone(), r.d.destination.clone(), key.clone()))
}

/// The barrier key of `d` with the endpoints of its tenant as they are now.
pub(super) fn barrier_of(
    d: &Delivery,
    endpoints: &HashMap<EndpointId, Endpoint>,
) -> Option<String> {
    let fifo = d
        .endpoint()
        .and_then(|id| endpoints.get(&id))
        .is_some_and(|e| e.fifo);
    let key = d.ordering_key.as_ref().map(OrderingKey::as_str);
    outboxkit_core::claim_rules::barrier_key(key, fifo).map(str::to_owned)
}

pub(super) fn spends(r: &Row) -> bool {
    claimable(r.d.status) && r.d.status != DeliveryStatus::Held && r.d.attempts > 0
}

pub(super) fn index_add(
    due: &mut BTreeSet<(Timestamp, u64, DeliveryId)>,
    groups: &mut Groups,
    ordered: &mut HashMap<OrderingSlot, BTreeMap<u64, DeliveryId>>,
    spent: &mut BTreeSet<(u32, DeliveryId)>,
    r: &Row,
) {
    if claimable(r.d.status) {
        due.insert((r.d.next_attempt_at, r.seq, r.d.id));
        groups
            .entry((r.d.tenant.clone(), r.d.destination.clone()))
            .or_default()
            .insert((r.d.next_attempt_at, r.seq, r.d.id));
    }
    if spends(r) {
        spent.insert((r.d.attempts, r.d.id));
    }
    if let Some(s) = slot(r).filter(|_| !r.d.status.is_finished()) {
        ordered.entry(s).or_default().insert(r.seq, r.d.id);
    }
}

pub(super) fn index_remove(
    due: &mut BTreeSet<(Timestamp, u64, DeliveryId)>,
    groups: &mut Groups,
    ordered: &mut HashMap<OrderingSlot, BTreeMap<u64, DeliveryId>>,
    spent: &mut BTreeSet<(u32, DeliveryId)>,
    r: &Row,
) {
    let key = (r.d.next_attempt_at, r.seq, r.d.id);
    if due.remove(&key) {
        let g = (r.d.tenant.clone(), r.d.destination.clone());
        if let Some(set) = groups.get_mut(&g) {
            set.remove(&key);
            if set.is_empty() {
                groups.remove(&g);
            }
        }
    }
    spent.remove(&(r.d.attempts, r.d.id));
    if let Some(s) = slot(r) {
        if let Some(m) = ordered.get_mut(&s) {
            m.remove(&r.seq);
            if m.is_empty() {
                ordered.remove(&s);
            }
        }
    }
}

/// Write a computed row change (status, counters, due time, outcome) and end any lease.
pub(super) fn apply(r: &mut Row, u: &DeliveryUpdate, now: Timestamp) {
    r.d.status = u.status;
    r.d.attempts = u.attempts;
    r.d.snoozes = u.snoozes;
    r.d.next_attempt_at = u.next_attempt_at;
    r.d.completed_at = u.completed_at;
    r.d.dead_reason = u.dead_reason;
    if let Some(o) = &u.last_outcome {
        r.d.last_outcome = Some(o.clone());
    }
    r.d.lease_until = None;
    r.token = None;
    r.d.updated_at = now;
}

pub(super) fn lease_lost() -> Error {
    Error::lease_lost()
}

pub(super) fn not_found(what: &'static str) -> Error {
    Error::not_found(what)
}

impl State {
    /// Change one row, keeping the indexes right.
    pub(super) fn modify<R>(&mut self, id: DeliveryId, f: impl FnOnce(&mut Row) -> R) -> Option<R> {
        let row = self.rows.get_mut(&id)?;
        index_remove(
            &mut self.due,
            &mut self.groups,
            &mut self.ordered,
            &mut self.spent,
            row,
        );
        let out = f(row);
        index_add(
            &mut self.due,
            &mut self.groups,
            &mut self.ordered,
            &mut self.spent,
            row,
        );
        Some(out)
    }

    pub(super) fn insert_row(&mut self, d: Delivery) {
        let barrier = barrier_of(&d, &self.endpoints);
        let row = Row {
            barrier,
            d,
            seq: self.next_seq,
            token: None,
            due_at: None,
        };
        self.next_seq += 1;
        index_add(
            &mut self.due,
            &mut self.groups,
            &mut self.ordered,
            &mut self.spent,
            &row,
        );
        self.rows.insert(row.d.id, row);
    }

    pub(super) fn remove_row(&mut self, id: DeliveryId) {
        if let Some(row) = self.rows.remove(&id) {
            index_remove(
                &mut self.due,
                &mut self.groups,
                &mut self.ordered,
                &mut self.spent,
                &row,
            );
        }
        self.attempts.remove(&id);
    }

    pub(super) fn row_of(&self, tenant: &TenantId, id: DeliveryId) -> Result<&Row> {
        self.rows
            .get(&id)
            .filter(|r| &r.d.tenant == tenant)
            .ok_or_else(|| not_found("delivery"))
    }

    // ----- enqueue -------------------------------------------------------------------

    /// Write one validated message and its fan-out (or find its duplicate).
    pub(super) fn enqueue(
        &mut self,
        v: ValidMessage,
        now: Timestamp,
        entropy: &dyn Entropy,
    ) -> Enqueued {
        let idem = v
            .idempotency_key
            .clone()
            .map(|k| (v.tenant.clone(), v.topic.clone(), k));
        if let Some(first) = idem.as_ref().and_then(|k| self.idempotency.get(k)) {
            return Enqueued {
                message_id: *first,
                deliveries: 0,
                duplicate: true,
            };
        }
        let message = fanout::message_row(&v, now, entropy);
        let consumers: Vec<Consumer> = self.consumers.values().cloned().collect();
        let endpoints: Vec<Endpoint> = self
            .endpoints
            .values()
            .filter(|e| e.tenant == v.tenant)
            .cloned()
            .collect();
        let destinations = fanout::destinations(&message, &v, &consumers, &endpoints);
        let mut rows = fanout::delivery_rows(&message, destinations, entropy);
        fanout::hold_for_endpoints(&mut rows, &endpoints, now);
        fanout::hold_for_consumers(&mut rows, &consumers);
        let out = Enqueued {
            message_id: message.id,
            deliveries: u32::try_from(rows.len()).unwrap_or(u32::MAX),
            duplicate: false,
        };
        if let Some(k) = idem {
            self.idempotency.insert(k, message.id);
        }
        self.messages.insert(message.id, message);
        for d in rows {
            self.insert_row(d);
        }
        out
    }
}
