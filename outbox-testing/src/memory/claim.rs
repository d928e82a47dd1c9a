//! The claim protocol on [`State`]: claim (fair rounds over the groups, ordering keys,
//! exhausted rows), complete, release, extend and mark sending, fenced by the claim token.

use std::time::Duration;

use outboxkit_core::{
    Attempt, ClaimRequest, ClaimToken, Claimed, Completion, DeliveryId, DeliveryStatus,
    DisabledReason, EndpointStatus, Entropy, Error, LastDelivery, Lease, ReleaseReport, Result,
    Timestamp,
};

use outboxkit_core::claim_rules::{
    barrier_blocks, fair_order, first_groups, group_limit, kill, lease, row_is_exhausted,
    EXHAUSTED_PER_CLAIM,
};
use outboxkit_core::ClaimSource;

use super::state::*;

impl State {
    // ----- the claim: core's claim rules (`outboxkit_core::claim_rules`) alone -----------

    /// The claim: kill the due exhausted rows it serves (at most core's bound; only rows
    /// that spent attempts can qualify), then lease the fair rounds' pick.
    pub fn claim(&mut self, q: &ClaimRequest, now: Timestamp, e: &dyn Entropy) -> Vec<Claimed> {
        let budgets = q.sources().iter().map(ClaimSource::max_attempts);
        let budget = budgets.min().unwrap_or(u32::MAX);
        let spent = self.spent.iter().rev().take_while(|s| s.0 >= budget);
        let spent = spent.map(|s| s.1);
        let dead = spent.filter(|&id| self.row(id).is_some_and(|r| row_is_exhausted(q, &r.d, now)));
        for id in dead.take(EXHAUSTED_PER_CLAIM).collect::<Vec<_>>() {
            self.modify(id, |r| (kill(&mut r.d, now), r.token = None));
        }
        let until = now.saturating_add(q.lease());
        let pick = self.pick(q, now).into_iter();
        let claimed = pick.filter_map(|id| self.lease(id, ClaimToken::generate(e), now, until));
        claimed.collect()
    }

    /// The fair rounds' pick: every served group offers its first claimable rows in due
    /// order (at most its limit), and core's `fair_order` takes round by round. With more
    /// groups than the batch only core's `first_groups` can get a turn.
    fn pick(&self, req: &ClaimRequest, now: Timestamp) -> Vec<DeliveryId> {
        let batch = req.batch_size() as usize;
        // At most `batch + 1` served groups are looked at (and `batch` copied) before the
        // choice below: with a group per e-mail recipient, copying every group's key on
        // every claim made a claim cost as much as the whole backlog (issue 36).
        let mut keys = self.groups.keys().filter(|g| req.serves(&g.1));
        let mut served: Vec<Group> = keys.by_ref().take(batch).cloned().collect();
        if keys.next().is_some() {
            let due = self.due.iter().take_while(|e| e.0 <= now);
            let ok = |r: &&Row| req.serves(&r.d.destination) && self.claimable(r, req, now);
            let firsts = due.filter_map(|e| self.row(e.2)).filter(ok);
            let groups = firsts.map(|r| (r.d.tenant.clone(), r.d.destination.clone()));
            served = first_groups(groups, batch);
        }
        let heads = served.iter().filter_map(|g| {
            let due = self.groups.get(g)?.iter().take_while(|e| e.0 <= now);
            let ok = due.filter(|e| self.row(e.2).is_some_and(|r| self.claimable(r, req, now)));
            let rows: Vec<_> = ok.take(group_limit(req, &g.1)).collect();
            let key = rows.first().map(|e| (e.0, e.1))?;
            Some((key, rows.iter().map(|e| e.2).collect()))
        });
        fair_order(heads.collect(), batch)
    }

    /// Whether a due row may be handed out: within its budget and not behind its key.
    fn claimable(&self, r: &Row, req: &ClaimRequest, now: Timestamp) -> bool {
        let older = slot(r).and_then(|s| self.ordered.get(&s));
        let older = older.into_iter().flat_map(|o| o.range(..r.seq));
        let topics = older.filter_map(|(_, id)| self.row(*id).map(|o| &o.d.topic));
        !row_is_exhausted(req, &r.d, now) && !barrier_blocks(topics, req.dormant())
    }

    /// Lease one row (core's `lease`), remembering when its attempt was due.
    fn lease(
        &mut self,
        id: DeliveryId,
        t: ClaimToken,
        now: Timestamp,
        until: Timestamp,
    ) -> Option<Claimed> {
        let message = self.messages.get(&self.row(id)?.d.message_id).cloned()?;
        self.modify(id, |r| {
            (r.due_at, r.token) = (Some(r.d.next_attempt_at), Some(t));
            let lease = lease(&mut r.d, t, now, until);
            Claimed {
                lease,
                delivery: r.d.clone(),
                message,
            }
        })
    }

    fn row(&self, id: DeliveryId) -> Option<&Row> {
        self.rows.get(&id)
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
        let (endpoint, run, due_at) = self
            .modify(id, |r| {
                apply(r, &u, now);
                (r.d.endpoint(), r.d.run, r.due_at)
            })
            .ok_or_else(lease_lost)?;
        if let Some(rec) = &c.attempt {
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
                // Filled from the message when the ledger is read (`State::attempts`).
                payload: unread_fingerprint(),
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
