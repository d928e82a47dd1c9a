//! The data of an [`super::InMemoryStore`] and every operation on it, as plain synchronous
//! code run under the store's lock. Row changes come from `outboxkit_core` (`fanout`,
//! `Lease::settle`, `Lease::release`); this module only selects rows and writes them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use outboxkit_core::{
    fanout, Attempt, ClaimRequest, ClaimToken, Claimed, Completion, Consumer, ConsumerName,
    DeadReason, Delivery, DeliveryId, DeliveryStatus, DeliveryUpdate, Destination, DisabledReason,
    Endpoint, EndpointId, EndpointStatus, Enqueued, Entropy, Error, ErrorKind, IdempotencyKey,
    LastDelivery, Lease, Message, MessageId, OrderingKey, PayloadFingerprint, ReleaseReport,
    Result, Stats, TenantId, Timestamp, Topic, ValidMessage,
};

/// One delivery with what the public type does not carry: its enqueue sequence and the
/// token of its current claim.
pub(super) struct Row {
    pub(super) d: Delivery,
    pub(super) seq: u64,
    pub(super) token: Option<ClaimToken>,
    /// When the current claim's attempt was due (the ledger's `scheduled_at`).
    pub(super) due_at: Option<Timestamp>,
}

type OrderingSlot = (TenantId, Destination, OrderingKey);

/// A claim group: a tenant and a destination.
type Group = (TenantId, Destination);

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
    pub(super) attempts: HashMap<DeliveryId, Vec<Attempt>>,
    pub(super) endpoints: HashMap<EndpointId, Endpoint>,
    pub(super) consumers: BTreeMap<ConsumerName, Consumer>,
    pub(super) next_seq: u64,
    pub(super) purge_cursor: Option<TenantId>,
}

fn claimable(s: DeliveryStatus) -> bool {
    matches!(
        s,
        DeliveryStatus::Pending
            | DeliveryStatus::Held
            | DeliveryStatus::Processing
            | DeliveryStatus::Sending
    )
}

fn slot(d: &Delivery) -> Option<OrderingSlot> {
    let key = d.ordering_key.as_ref()?;
    Some((d.tenant.clone(), d.destination.clone(), key.clone()))
}

fn spends(r: &Row) -> bool {
    claimable(r.d.status) && r.d.status != DeliveryStatus::Held && r.d.attempts > 0
}

fn index_add(
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
    if let Some(s) = slot(&r.d).filter(|_| !r.d.status.is_finished()) {
        ordered.entry(s).or_default().insert(r.seq, r.d.id);
    }
}

fn index_remove(
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
    if let Some(s) = slot(&r.d) {
        if let Some(m) = ordered.get_mut(&s) {
            m.remove(&r.seq);
            if m.is_empty() {
                ordered.remove(&s);
            }
        }
    }
}

/// Write a computed row change (status, counters, due time, outcome) and end any lease.
fn apply(r: &mut Row, u: &DeliveryUpdate, now: Timestamp) {
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

fn lease_lost() -> Error {
    Error::lease_lost()
}

pub(super) fn not_found(what: &'static str) -> Error {
    Error::not_found(what)
}

impl State {
    /// Change one row, keeping the indexes right.
    fn modify<R>(&mut self, id: DeliveryId, f: impl FnOnce(&mut Row) -> R) -> Option<R> {
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

    fn insert_row(&mut self, d: Delivery) {
        let row = Row {
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

    // ----- claim protocol ------------------------------------------------------------

    fn blocked(&self, r: &Row, dormant: &BTreeSet<Topic>) -> bool {
        let Some(s) = slot(&r.d) else { return false };
        self.ordered.get(&s).is_some_and(|older| {
            older.range(..r.seq).any(|(_, id)| {
                self.rows
                    .get(id)
                    .is_some_and(|o| !dormant.contains(&o.d.topic))
            })
        })
    }

    /// A group's claimable rows (at most `batch`, due by `now`, not blocked) in due order,
    /// with the due key of the first; `None` when it has none.
    fn group_head(
        &self,
        set: &BTreeSet<(Timestamp, u64, DeliveryId)>,
        req: &ClaimRequest,
        now: Timestamp,
        batch: usize,
    ) -> Option<((Timestamp, u64), Vec<DeliveryId>)> {
        let mut ids = Vec::new();
        let mut first = None;
        for &(at, seq, id) in set {
            if at > now || ids.len() >= batch {
                break;
            }
            let Some(r) = self.rows.get(&id) else {
                continue;
            };
            if self.blocked(r, req.dormant()) {
                continue;
            }
            first.get_or_insert((at, seq));
            ids.push(id);
        }
        first.map(|f| (f, ids))
    }

    /// The claim protocol: kill exhausted candidates, then take the oldest unblocked ones.
    pub(super) fn claim(
        &mut self,
        req: &ClaimRequest,
        now: Timestamp,
        entropy: &dyn Entropy,
    ) -> Vec<Claimed> {
        // Exhausted rows (§6.5): every due, served, not-held row at or past its budget dies,
        // batch or no batch. Only rows that have spent attempts can qualify.
        let min_budget = req
            .sources()
            .iter()
            .map(|src| match src {
                outboxkit_core::ClaimSource::Handler { max_attempts, .. }
                | outboxkit_core::ClaimSource::Webhooks { max_attempts }
                | outboxkit_core::ClaimSource::Email { max_attempts } => *max_attempts,
            })
            .min()
            .unwrap_or(u32::MAX);
        let exhausted: Vec<DeliveryId> = self
            .spent
            .iter()
            .rev()
            .take_while(|(attempts, _)| *attempts >= min_budget)
            .map(|(_, id)| *id)
            .filter(|id| {
                self.rows.get(id).is_some_and(|r| {
                    r.d.next_attempt_at <= now
                        && req.serves(&r.d.destination)
                        && r.d.attempts >= req.budget_for(&r.d.destination).unwrap_or(0)
                })
            })
            .collect();
        for id in exhausted {
            self.modify(id, |r| {
                r.d.status = DeliveryStatus::Dead;
                r.d.dead_reason = Some(DeadReason::MaxAttempts);
                r.d.completed_at = Some(now);
                r.d.lease_until = None;
                r.token = None;
                r.d.updated_at = now;
            });
        }
        // Then the due rows, fairly: each served group read from its head (at most a batch
        // of claimable rows each, in due order), groups in the order of their oldest
        // claimable row, taken round by round.
        let batch = req.batch_size() as usize;
        let mut heads: Vec<((Timestamp, u64), Vec<DeliveryId>)> = Vec::new();
        if self.groups.len() > batch {
            // Many groups (every e-mail recipient is one): round one of the claim takes one
            // row from each of the `batch` groups whose oldest claimable row comes first,
            // and no later group is reached. Find those groups by walking the due rows in
            // order rather than reading every group's head: the same groups, in the same
            // order, without work proportional to the number of groups.
            let mut seen = std::collections::HashSet::new();
            for &(at, _, id) in &self.due {
                if at > now || seen.len() >= batch {
                    break;
                }
                let Some(r) = self.rows.get(&id) else {
                    continue;
                };
                if !req.serves(&r.d.destination) || self.blocked(r, req.dormant()) {
                    continue;
                }
                let group = (r.d.tenant.clone(), r.d.destination.clone());
                if seen.insert(group.clone()) {
                    if let Some(head) = self.groups.get(&group).and_then(|set| {
                        let limit = batch.min(req.group_limit(&group.1));
                        self.group_head(set, req, now, limit)
                    }) {
                        heads.push(head);
                    }
                }
            }
        } else {
            for ((_, destination), set) in &self.groups {
                if !req.serves(destination) {
                    continue;
                }
                let limit = batch.min(req.group_limit(destination));
                if let Some(head) = self.group_head(set, req, now, limit) {
                    heads.push(head);
                }
            }
        }
        heads.sort_by_key(|(first, _)| *first);
        let groups: Vec<Vec<DeliveryId>> = heads.into_iter().map(|(_, ids)| ids).collect();
        let mut live = Vec::with_capacity(batch);
        for round in 0..batch {
            let before = live.len();
            for ids in &groups {
                if live.len() >= batch {
                    break;
                }
                if let Some(id) = ids.get(round) {
                    live.push(*id);
                }
            }
            if live.len() == before || live.len() >= batch {
                break;
            }
        }
        let until = now.saturating_add(req.lease());
        let mut out = Vec::with_capacity(live.len());
        for id in live {
            let Some(r) = self.rows.get(&id) else {
                continue;
            };
            let Some(message) = self.messages.get(&r.d.message_id).cloned() else {
                continue;
            };
            let token = ClaimToken::generate(entropy);
            let claimed = self.modify(id, |r| {
                let from = r.d.status;
                if from != DeliveryStatus::Held {
                    r.d.attempts = r.d.attempts.saturating_add(1);
                }
                r.due_at = Some(r.d.next_attempt_at);
                r.d.status = DeliveryStatus::Processing;
                r.d.lease_until = Some(until);
                r.d.next_attempt_at = until;
                r.d.updated_at = now;
                r.token = Some(token);
                let lease = Lease {
                    delivery_id: id,
                    tenant: r.d.tenant.clone(),
                    token,
                    until,
                    attempts: r.d.attempts,
                    snoozes: r.d.snoozes,
                    claimed_from: from,
                };
                Claimed {
                    lease,
                    delivery: r.d.clone(),
                    message,
                }
            });
            out.extend(claimed);
        }
        out
    }

    /// `Ok` when the lease still owns its row (§6.2).
    fn fenced(&self, lease: &Lease) -> Result<()> {
        match self.rows.get(&lease.delivery_id) {
            Some(r)
                if r.token == Some(lease.token)
                    && r.d.tenant == lease.tenant
                    && matches!(
                        r.d.status,
                        DeliveryStatus::Processing | DeliveryStatus::Sending
                    ) =>
            {
                Ok(())
            }
            _ => Err(Error::lease_lost()),
        }
    }

    /// Write `lease.settle(..)`, append the attempt, disable the endpoint on `gone`.
    pub(super) fn complete(&mut self, lease: &Lease, c: &Completion, now: Timestamp) -> Result<()> {
        self.fenced(lease)?;
        let mut u = lease.settle(&c.verdict, c.attempt.as_ref(), now);
        let id = lease.delivery_id;
        if u.awaits_endpoint {
            let endpoint = self.rows.get(&id).and_then(|r| r.d.endpoint());
            let waits = endpoint
                .and_then(|e| self.endpoints.get(&e))
                .is_some_and(|e| e.tenant == lease.tenant && e.status != EndpointStatus::Active);
            if !waits {
                u.endpoint_is_back(now);
            }
        }
        let (endpoint, run, due_at, message_id) = self
            .modify(id, |r| {
                apply(r, &u, now);
                (r.d.endpoint(), r.d.run, r.due_at, r.d.message_id)
            })
            .ok_or_else(lease_lost)?;
        if let Some(rec) = &c.attempt {
            let payload = self
                .messages
                .get(&message_id)
                .map(|m| PayloadFingerprint::of(&m.payload))
                .unwrap_or_else(|| PayloadFingerprint::of(&[]));
            let list = self.attempts.entry(id).or_default();
            let number = u32::try_from(list.len())
                .unwrap_or(u32::MAX)
                .saturating_add(1);
            list.push(Attempt {
                delivery_id: id,
                number,
                probe: lease.is_probe(),
                run,
                scheduled_at: due_at,
                payload,
                record: rec.clone(),
            });
            // The endpoint's last status, in the same step as the completion.
            if let Some(e) = endpoint.and_then(|e| self.endpoints.get_mut(&e)) {
                e.last_delivery = Some(LastDelivery::from(rec));
            }
        }
        if u.disable_endpoint {
            if let Some(e) = endpoint.and_then(|e| self.endpoints.get_mut(&e)) {
                e.status = EndpointStatus::Disabled(DisabledReason::Gone);
                e.updated_at = now;
            }
        }
        Ok(())
    }

    /// Write `lease.release(..)` for every lease that still owns its row.
    pub(super) fn release(
        &mut self,
        leases: &[Lease],
        delay: Duration,
        now: Timestamp,
    ) -> ReleaseReport {
        let mut report = ReleaseReport::default();
        for lease in leases {
            if self.fenced(lease).is_ok() {
                let u = lease.release(delay, now);
                self.modify(lease.delivery_id, |r| apply(r, &u, now));
                report.released += 1;
            } else {
                report.lost += 1;
            }
        }
        report
    }

    /// Move the lease end to `now + by`.
    pub(super) fn extend(&mut self, lease: &Lease, by: Duration, now: Timestamp) -> Result<Lease> {
        self.fenced(lease)?;
        let until = now.saturating_add(by);
        self.modify(lease.delivery_id, |r| {
            r.d.lease_until = Some(until);
            r.d.next_attempt_at = until;
        });
        Ok(Lease {
            until,
            ..lease.clone()
        })
    }

    /// `processing` → `sending`.
    pub(super) fn mark_sending(&mut self, lease: &Lease, now: Timestamp) -> Result<()> {
        self.fenced(lease)?;
        self.modify(lease.delivery_id, |r| {
            r.d.status = DeliveryStatus::Sending;
            r.d.updated_at = now;
        });
        Ok(())
    }

    // ----- operator calls ------------------------------------------------------------

    /// Every held delivery of the endpoint becomes pending, due now.
    pub(super) fn release_held(
        &mut self,
        tenant: &TenantId,
        endpoint: EndpointId,
        now: Timestamp,
    ) -> u64 {
        let target = Destination::Webhook(endpoint);
        let held: Vec<DeliveryId> = self
            .rows
            .values()
            .filter(|r| {
                r.d.status == DeliveryStatus::Held
                    && &r.d.tenant == tenant
                    && r.d.destination == target
            })
            .map(|r| r.d.id)
            .collect();
        for id in &held {
            self.modify(*id, |r| {
                r.d.status = DeliveryStatus::Pending;
                r.d.next_attempt_at = now;
                r.d.updated_at = now;
            });
        }
        held.len() as u64
    }

    /// The endpoint's pending and held deliveries wait for it: `held` until `until`.
    pub(super) fn hold_for_endpoint(
        &mut self,
        tenant: &TenantId,
        endpoint: EndpointId,
        until: Timestamp,
        now: Timestamp,
    ) -> u64 {
        let target = Destination::Webhook(endpoint);
        let waiting: Vec<DeliveryId> = self
            .rows
            .values()
            .filter(|r| {
                matches!(r.d.status, DeliveryStatus::Pending | DeliveryStatus::Held)
                    && &r.d.tenant == tenant
                    && r.d.destination == target
            })
            .map(|r| r.d.id)
            .collect();
        for id in &waiting {
            self.modify(*id, |r| {
                r.d.status = DeliveryStatus::Held;
                r.d.next_attempt_at = until;
                r.d.updated_at = now;
            });
        }
        waiting.len() as u64
    }

    /// A held delivery gets a fresh budget, due now.
    pub(super) fn reset(
        &mut self,
        tenant: &TenantId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<()> {
        if self.row_of(tenant, id)?.d.status != DeliveryStatus::Held {
            return Err(Error::new(
                ErrorKind::Conflict,
                "only a held delivery can be reset",
            ));
        }
        self.modify(id, |r| {
            r.d.status = DeliveryStatus::Pending;
            r.d.attempts = 0;
            r.d.snoozes = 0;
            r.d.next_attempt_at = now;
            r.d.updated_at = now;
        });
        Ok(())
    }

    /// A dead delivery gets a fresh budget, due now.
    pub(super) fn replay(
        &mut self,
        tenant: &TenantId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<()> {
        if self.row_of(tenant, id)?.d.status != DeliveryStatus::Dead {
            return Err(Error::new(
                ErrorKind::Conflict,
                "only a dead delivery can be replayed",
            ));
        }
        self.modify(id, |r| {
            r.d.status = DeliveryStatus::Pending;
            r.d.attempts = 0;
            r.d.snoozes = 0;
            r.d.run = r.d.run.saturating_add(1);
            r.d.next_attempt_at = now;
            r.d.dead_reason = None;
            r.d.completed_at = None;
            r.d.lease_until = None;
            r.token = None;
            r.d.updated_at = now;
        });
        Ok(())
    }

    /// A pending or held delivery becomes pending, due now, attempts kept.
    pub(super) fn retry_now(
        &mut self,
        tenant: &TenantId,
        id: DeliveryId,
        now: Timestamp,
    ) -> Result<()> {
        let status = self.row_of(tenant, id)?.d.status;
        if !matches!(status, DeliveryStatus::Pending | DeliveryStatus::Held) {
            return Err(Error::new(
                ErrorKind::Conflict,
                "only a pending or held delivery can be retried now",
            ));
        }
        self.modify(id, |r| {
            r.d.status = DeliveryStatus::Pending;
            r.d.next_attempt_at = now;
            r.d.updated_at = now;
        });
        Ok(())
    }

    /// Counts per status and the oldest due claimable delivery.
    pub(super) fn stats(&self, now: Timestamp) -> Stats {
        let mut s = Stats::default();
        for r in self.rows.values() {
            s.add(r.d.status, 1);
        }
        s.oldest_due_at = self.due.first().map(|k| k.0).filter(|t| *t <= now);
        s.oldest_due_age = s.oldest_due_at.map(|t| now.duration_since(t));
        s
    }

    /// [`State::stats`] over the rows `keep` accepts.
    pub(super) fn stats_where(&self, now: Timestamp, keep: impl Fn(&Delivery) -> bool) -> Stats {
        let mut s = Stats::default();
        for r in self.rows.values().filter(|r| keep(&r.d)) {
            s.add(r.d.status, 1);
            if !r.d.status.is_finished() && r.d.next_attempt_at <= now {
                let t = r.d.next_attempt_at;
                s.oldest_due_at = Some(s.oldest_due_at.map_or(t, |o| o.min(t)));
            }
        }
        s.oldest_due_age = s.oldest_due_at.map(|t| now.duration_since(t));
        s
    }
}
