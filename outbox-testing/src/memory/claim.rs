//! The claim protocol on [`State`]: claim (fair rounds over the groups, ordering keys,
//! exhausted rows), complete, release, extend and mark sending, fenced by the claim token.

use std::time::Duration;

use outboxkit_core::{
    Attempt, ClaimRequest, ClaimToken, Claimed, Completion, DeadReason, DeliveryId, DeliveryStatus,
    DisabledReason, EndpointStatus, Entropy, Error, LastDelivery, Lease, PayloadFingerprint,
    ReleaseReport, Result, Timestamp,
};

use outboxkit_core::claim_rules::{
    barrier_blocks, fair_order, group_limit, is_exhausted, EXHAUSTED_PER_CLAIM,
};
use outboxkit_core::ClaimSource;

use super::state::*;

/// A group's first-row key and its claimable rows, in due order.
type Head = ((Timestamp, u64), Vec<DeliveryId>);

impl State {
    // ----- claim protocol: core's claim rules (`outboxkit_core::claim_rules`) --------

    /// Whether a due row may be handed out: within its budget and not behind its key.
    fn claimable(&self, r: &Row, req: &ClaimRequest, now: Timestamp) -> bool {
        let older = slot(&r.d).and_then(|s| self.ordered.get(&s));
        let older = older.into_iter().flat_map(|o| o.range(..r.seq));
        let topics = older.filter_map(|(_, id)| self.rows.get(id).map(|o| &o.d.topic));
        let due = r.d.next_attempt_at <= now;
        !is_exhausted(req, &r.d.destination, r.d.status, r.d.attempts, due)
            && !barrier_blocks(topics, req.dormant())
    }

    /// A group's first claimable rows in due order (at most its limit), keyed by the first.
    fn group_head(&self, group: &Group, req: &ClaimRequest, now: Timestamp) -> Option<Head> {
        let limit = group_limit(req, &group.1);
        let rows: Vec<_> = (self.groups.get(group)?.iter())
            .take_while(|(at, _, _)| *at <= now)
            .filter(|(_, _, id)| {
                self.rows
                    .get(id)
                    .is_some_and(|r| self.claimable(r, req, now))
            })
            .take(limit)
            .collect();
        let &&(at, seq, _) = rows.first()?;
        Some(((at, seq), rows.iter().map(|e| e.2).collect()))
    }

    /// The served groups with claimable rows. With more groups than the batch (every
    /// e-mail recipient is one) only the `batch` whose first claimable row comes first can
    /// get a turn: found by walking the due rows in order, not by reading every group.
    fn heads(&self, req: &ClaimRequest, now: Timestamp, batch: usize) -> Vec<Head> {
        if self.groups.len() <= batch {
            let served = self.groups.keys().filter(|g| req.serves(&g.1));
            return served
                .filter_map(|g| self.group_head(g, req, now))
                .collect();
        }
        let mut seen = std::collections::HashSet::new();
        let due = self.due.iter().take_while(|(at, _, _)| *at <= now);
        let rows = due.filter_map(|(_, _, id)| self.rows.get(id));
        let firsts = rows.filter(|r| req.serves(&r.d.destination) && self.claimable(r, req, now));
        let groups = firsts.map(|r| (r.d.tenant.clone(), r.d.destination.clone()));
        let new = groups.filter(|g| seen.insert(g.clone())).take(batch);
        new.filter_map(|g| self.group_head(&g, req, now)).collect()
    }

    /// Kill the due exhausted rows the claim serves, at most core's bound (§6.5); only rows
    /// that have spent attempts can qualify.
    fn kill_exhausted(&mut self, req: &ClaimRequest, now: Timestamp) {
        let min_budget = req.sources().iter().map(ClaimSource::max_attempts).min();
        let spent = self.spent.iter().rev();
        let spent = spent.take_while(|(a, _)| min_budget.is_some_and(|m| *a >= m));
        let dead: Vec<DeliveryId> = (spent.map(|(_, id)| *id))
            .filter(|id| {
                self.rows.get(id).is_some_and(|r| {
                    let due = r.d.next_attempt_at <= now;
                    is_exhausted(req, &r.d.destination, r.d.status, r.d.attempts, due)
                })
            })
            .take(EXHAUSTED_PER_CLAIM)
            .collect();
        for id in dead {
            self.modify(id, |r| {
                r.d.status = DeliveryStatus::Dead;
                r.d.dead_reason = Some(DeadReason::MaxAttempts);
                r.d.completed_at = Some(now);
                r.d.lease_until = None;
                r.token = None;
                r.d.updated_at = now;
            });
        }
    }

    /// The claim protocol: kill exhausted rows, then lease the fair rounds' pick.
    pub(super) fn claim(
        &mut self,
        req: &ClaimRequest,
        now: Timestamp,
        entropy: &dyn Entropy,
    ) -> Vec<Claimed> {
        self.kill_exhausted(req, now);
        let batch = req.batch_size() as usize;
        let live = fair_order(self.heads(req, now, batch), batch);
        let until = now.saturating_add(req.lease());
        let lease = |id| self.lease(id, now, until, ClaimToken::generate(entropy));
        live.into_iter().filter_map(lease).collect()
    }

    /// Lease one row: `processing` until `until`, an attempt spent unless it was held.
    fn lease(
        &mut self,
        id: DeliveryId,
        now: Timestamp,
        until: Timestamp,
        token: ClaimToken,
    ) -> Option<Claimed> {
        let r = self.rows.get(&id)?;
        let message = self.messages.get(&r.d.message_id).cloned()?;
        self.modify(id, |r| {
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
        })
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
