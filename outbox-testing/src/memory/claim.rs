//! The claim protocol on [`State`]: claim (fair rounds over the groups, ordering keys,
//! exhausted rows), complete, release, extend and mark sending, fenced by the claim token.

use std::collections::BTreeSet;
use std::time::Duration;

use outboxkit_core::{
    Attempt, ClaimRequest, ClaimToken, Claimed, Completion, DeadReason, DeliveryId, DeliveryStatus,
    DisabledReason, EndpointStatus, Entropy, Error, LastDelivery, Lease, PayloadFingerprint,
    ReleaseReport, Result, Timestamp, Topic,
};

use super::state::*;

impl State {
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
}
