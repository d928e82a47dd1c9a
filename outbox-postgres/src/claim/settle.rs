//! Settling claims on PostgreSQL: complete (in batches, one statement for the rows, the
//! history, the attempts and the endpoints), release, extend and mark sending, each fenced
//! by the lease's token. The module's cancel-safety notes (in `claim/mod.rs`) cover these.

use super::*;

/// The columns of one completion, as parallel arrays for the `unnest` of `complete`
/// (`sql/claim.sql`).
#[derive(Default)]
struct CompletionArrays {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    status: Vec<i16>,
    attempts: Vec<i32>,
    snoozes: Vec<i32>,
    next_at: Vec<i64>,
    dead_reason: Vec<Option<&'static str>>,
    disable: Vec<bool>,
    a_set: Vec<bool>,
    a_probe: Vec<bool>,
    a_started: Vec<i64>,
    a_finished: Vec<i64>,
    a_outcome: Vec<&'static str>,
    a_code: Vec<Option<i32>>,
    a_excerpt: Vec<Option<String>>,
    tenants: Vec<String>,
    awaits: Vec<bool>,
    /// Empty unless an item has a detail (the statement reads a missing one as NULL).
    a_detail: Vec<Option<String>>,
}

impl PostgresStore {
    /// `DeliveryStore::complete_many`: `complete` of `sql/claim.sql` for every item.
    pub(crate) async fn complete_now(
        &self,
        items: &[(Lease, Completion)],
    ) -> Result<Vec<Result<()>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.inner.clock.now();
        self.ensure_history(now).await?;
        let mut a = CompletionArrays::default();
        // A delivery named twice in one call: only its first item can match.
        let mut seen = HashSet::with_capacity(items.len());
        let mut sent = Vec::with_capacity(items.len());
        // Items whose row leaves the queue (succeeded or dead).
        let mut finishing = 0;
        for (lease, completion) in items {
            if !seen.insert(lease.delivery_id) {
                sent.push(false);
                continue;
            }
            sent.push(true);
            let u = lease.settle(&completion.verdict, completion.attempt.as_ref(), now);
            a.ids.push(lease.delivery_id.as_uuid());
            a.tokens.push(lease.token.as_uuid());
            finishing += usize::from(u.status.is_finished());
            a.status.push(rows::state_code(u.status)?);
            a.attempts.push(int4(u.attempts));
            a.snoozes.push(int4(u.snoozes));
            a.next_at.push(ms(u.next_attempt_at));
            a.dead_reason.push(u.dead_reason.map(|r| r.as_str()));
            a.disable.push(u.disable_endpoint);
            a.awaits.push(u.awaits_endpoint);
            let rec = completion.attempt.as_ref();
            a.a_set.push(rec.is_some());
            a.a_probe.push(lease.is_probe());
            a.a_started.push(rec.map_or(0, |r| ms(r.started_at)));
            a.a_finished.push(rec.map_or(0, |r| ms(r.finished_at)));
            a.a_outcome
                .push(rec.map_or("succeeded", |r| r.outcome.as_str()));
            a.a_code
                .push(rec.and_then(|r| r.status_code).map(i32::from));
            a.a_excerpt.push(rec.and_then(|r| r.excerpt.clone()));
            a.tenants.push(lease.tenant.as_str().to_owned());
            if let Some(d) = rec.and_then(|r| r.detail.as_deref()) {
                // Earlier items without a detail: NULL, in their places.
                a.a_detail.resize(a.ids.len() - 1, None);
                a.a_detail.push(Some(d.to_json()));
            }
        }
        let all_finish = finishing == a.ids.len();
        let params = Params::new()
            .set("now", ms(now))
            .set("ids", a.ids)
            .set("tokens", a.tokens)
            .set("statuses", a.status)
            .set("attempts", a.attempts)
            .set("snoozes", a.snoozes)
            .set("next_at", a.next_at)
            .set("dead_reasons", a.dead_reason)
            .set("disable", a.disable)
            .set("a_set", a.a_set)
            .set("a_probe", a.a_probe)
            .set("a_started", a.a_started)
            .set("a_finished", a.a_finished)
            .set("a_outcomes", a.a_outcome)
            .set("a_codes", a.a_code)
            .set("a_excerpts", a.a_excerpt)
            .set("tenants", a.tenants)
            .set("awaits", a.awaits)
            .set("a_details", a.a_detail);
        // A batch in which every item finishes takes the shorter statement.
        let sql = &self.inner.sql.claim;
        let statement = if all_finish {
            &sql.complete_finished
        } else {
            &sql.complete
        };
        let mut conn = self.inner.hot.settle.acquire().await.db()?;
        let took = Stopwatch::start();
        let matched: Vec<Uuid> = (statement.bind_scalar(params)?)
            .fetch_all(&mut *conn)
            .await
            .db()?;
        crate::hot::replan_if_slow(&mut conn, &took).await;
        drop(conn);
        let matched: HashSet<Uuid> = matched.into_iter().collect();
        Ok(items
            .iter()
            .zip(sent)
            .map(|((lease, _), sent)| {
                if sent && matched.contains(&lease.delivery_id.as_uuid()) {
                    Ok(())
                } else {
                    Err(Error::lease_lost())
                }
            })
            .collect())
    }
}

impl PostgresStore {
    /// `DeliveryStore::release`: [`release_text`] for every lease.
    pub(crate) async fn release_now(
        &self,
        leases: &[Lease],
        delay: Duration,
    ) -> Result<ReleaseReport> {
        if leases.is_empty() {
            return Ok(ReleaseReport::default());
        }
        let now = self.inner.clock.now();
        let mut seen = HashSet::with_capacity(leases.len());
        let (mut ids, mut tokens, mut status, mut attempts, mut next, mut tenants) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for lease in leases.iter().filter(|l| seen.insert(l.delivery_id)) {
            let u = lease.release(delay, now);
            ids.push(lease.delivery_id.as_uuid());
            tokens.push(lease.token.as_uuid());
            status.push(rows::state_code(u.status)?);
            attempts.push(int4(u.attempts));
            next.push(ms(u.next_attempt_at));
            tenants.push(lease.tenant.as_str());
        }
        let params = Params::new()
            .set("now", ms(now))
            .set("ids", ids)
            .set("tokens", tokens)
            .set("statuses", status)
            .set("attempts", attempts)
            .set("next_at", next)
            .set("tenants", tenants);
        let mut conn = self.inner.hot.settle.acquire().await.db()?;
        let took = Stopwatch::start();
        let released: Vec<Uuid> = (self.inner.sql.claim.release.bind_scalar(params)?)
            .fetch_all(&mut *conn)
            .await
            .db()?;
        crate::hot::replan_if_slow(&mut conn, &took).await;
        drop(conn);
        let released = u32::try_from(released.len()).unwrap_or(u32::MAX);
        if released > 0 {
            self.inner.wake.wakeups().wake();
        }
        Ok(ReleaseReport {
            released,
            lost: u32::try_from(leases.len()).unwrap_or(u32::MAX) - released,
        })
    }
}

impl PostgresStore {
    /// `DeliveryStore::extend`.
    pub(crate) async fn extend_now(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        let now = self.inner.clock.now();
        let until = now.saturating_add(by);
        let params = Params::new()
            .set("delivery", lease.delivery_id.as_uuid())
            .set("token", lease.token.as_uuid())
            .set("until", ms(until))
            .set("now", ms(now))
            .set("tenant", lease.tenant.as_str());
        let found: Option<Uuid> = (self.inner.sql.claim.extend.bind_scalar(params)?)
            .fetch_optional(&self.inner.pool)
            .await
            .db()?;
        match found {
            Some(_) => Ok(Lease {
                until,
                ..lease.clone()
            }),
            None => Err(Error::lease_lost()),
        }
    }
}

impl PostgresStore {
    /// `DeliveryStore::mark_sending`.
    pub(crate) async fn mark_sending_now(&self, lease: &Lease) -> Result<()> {
        let params = Params::new()
            .set("delivery", lease.delivery_id.as_uuid())
            .set("token", lease.token.as_uuid())
            .set("now", ms(self.inner.clock.now()))
            .set("tenant", lease.tenant.as_str());
        let found: Option<Uuid> = (self.inner.sql.claim.mark_sending.bind_scalar(params)?)
            .fetch_optional(&self.inner.pool)
            .await
            .db()?;
        found.map(|_| ()).ok_or_else(Error::lease_lost)
    }
}
