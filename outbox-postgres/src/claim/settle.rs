//! Settling claims on PostgreSQL: complete (in batches, one statement for the rows, the
//! history, the attempts and the endpoints), release, extend and mark sending, each fenced
//! by the lease's token. The module's cancel-safety notes (in `claim/mod.rs`) cover these.

use super::*;

/// The columns of one completion, as parallel arrays for `unnest`, in the order of the
/// parameters of [`complete_text`] ($2…$23).
#[derive(Default)]
struct CompletionArrays {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    status: Vec<&'static str>,
    attempts: Vec<i32>,
    snoozes: Vec<i32>,
    next_at: Vec<i64>,
    completed_at: Vec<Option<i64>>,
    dead_reason: Vec<Option<&'static str>>,
    lo_outcome: Vec<Option<&'static str>>,
    lo_code: Vec<Option<i32>>,
    lo_excerpt: Vec<Option<String>>,
    lo_at: Vec<Option<i64>>,
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
}

/// The completion statement: $1 now, then one array per field of [`CompletionArrays`], in
/// its order ($2 ids … $23 awaits), bound by [`PostgresStore::complete_now`].
///
/// A row that stays unfinished is updated in place (`upd`); one that finishes (succeeded,
/// dead) is deleted from the hot table (`fin`, its new values computed in `RETURNING`) and
/// appended to the history (`ins`) in the same statement. Both feed the attempt insert and
/// the endpoint's last status.
pub(super) fn complete_text(t: &Tables) -> String {
    let (d, a, e, done) = (&t.deliveries, &t.attempts, &t.endpoints, &t.done);
    let finished = "u.status IN ('succeeded', 'dead')";
    let fenced = "d.id = u.id AND d.claim_token = u.token AND d.tenant = u.tenant \
                  AND d.status IN ('processing', 'sending')";
    let endpoint_id = "CASE WHEN d.kind = 'webhook' THEN d.target::uuid END AS endpoint_id";
    let attempt_cols = "u.disable, u.a_set, u.a_probe, u.a_started, u.a_finished, \
                        u.a_outcome, u.a_code, u.a_excerpt";
    let res_cols = "id, tenant, ledger_len, run, due_at, endpoint_id, disable, a_set, a_probe, \
                    a_started, a_finished, a_outcome, a_code, a_excerpt";
    format!(
        "WITH u AS ( \
           SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::int4[], $6::int4[], \
                                $7::int8[], $8::int8[], $9::text[], $10::text[], $11::int4[], \
                                $12::text[], $13::int8[], $14::bool[], $15::bool[], \
                                $16::bool[], $17::int8[], $18::int8[], $19::text[], \
                                $20::int4[], $21::text[], $22::text[], $23::bool[]) \
             AS u(id, token, status, attempts, snoozes, next_at, completed_at, dead_reason, \
                  lo_outcome, lo_code, lo_excerpt, lo_at, disable, \
                  a_set, a_probe, a_started, a_finished, a_outcome, a_code, a_excerpt, \
                  tenant, awaits)), \
         upd AS ( \
           UPDATE {d} d SET \
                  status = CASE WHEN {back} THEN 'pending' ELSE u.status END, \
                  attempts = u.attempts, snoozes = u.snoozes, \
                  next_attempt_at = CASE WHEN {back} THEN $1::int8 ELSE u.next_at END, \
                  completed_at = u.completed_at, \
                  dead_reason = u.dead_reason, \
                  last_outcome = coalesce(u.lo_outcome, d.last_outcome), \
                  last_status_code = {lo_code}, \
                  last_excerpt = {lo_excerpt}, \
                  last_at = {lo_at}, \
                  claim_token = NULL, lease_until = NULL, updated_at = $1::int8, \
                  ledger_len = d.ledger_len + CASE WHEN u.a_set THEN 1 ELSE 0 END \
             FROM u \
            WHERE {fenced} AND NOT {finished} \
           RETURNING d.id, d.tenant, d.ledger_len, d.run, d.due_at, {endpoint_id}, \
                     {attempt_cols}), \
         fin AS ( \
           DELETE FROM {d} d USING u \
            WHERE {fenced} AND {finished} \
           RETURNING d.seq, d.id, d.message_id, d.tenant, d.topic, d.ordering_key, d.kind, \
                     d.target, u.status, u.attempts, u.snoozes, \
                     u.next_at AS next_attempt_at, NULL::int8 AS lease_until, \
                     NULL::uuid AS claim_token, \
                     coalesce(u.lo_outcome, d.last_outcome) AS last_outcome, \
                     {lo_code} AS last_status_code, {lo_excerpt} AS last_excerpt, \
                     {lo_at} AS last_at, u.dead_reason, \
                     d.ledger_len + CASE WHEN u.a_set THEN 1 ELSE 0 END AS ledger_len, \
                     d.created_at, $1::int8 AS updated_at, u.completed_at, d.run, d.due_at, \
                     {endpoint_id}, {attempt_cols}), \
         ins AS (INSERT INTO {done} ({ROW_COLS}) SELECT {ROW_COLS} FROM fin), \
         res AS (SELECT {res_cols} FROM upd UNION ALL SELECT {res_cols} FROM fin), \
         att AS ( \
           INSERT INTO {a} (delivery_id, number, tenant, probe, started_at, finished_at, \
                            outcome, status_code, excerpt, run, scheduled_at) \
           SELECT id, ledger_len, tenant, a_probe, a_started, a_finished, a_outcome, a_code, \
                  a_excerpt, run, due_at \
             FROM res WHERE a_set), \
         ep AS ( \
           SELECT endpoint_id, tenant, bool_or(disable) AS gone, \
                  (array_agg(a_outcome ORDER BY a_finished DESC) FILTER (WHERE a_set))[1] \
                    AS o, \
                  (array_agg(a_code ORDER BY a_finished DESC) FILTER (WHERE a_set))[1] AS c, \
                  max(a_finished) FILTER (WHERE a_set) AS at \
             FROM res WHERE endpoint_id IS NOT NULL AND (disable OR a_set) \
            GROUP BY endpoint_id, tenant), \
         dis AS ( \
           UPDATE {e} e SET \
                  status = CASE WHEN ep.gone THEN 'disabled' ELSE e.status END, \
                  disabled_reason = CASE WHEN ep.gone THEN 'gone' ELSE e.disabled_reason END, \
                  updated_at = CASE WHEN ep.gone THEN $1::int8 ELSE e.updated_at END, \
                  last_outcome = CASE WHEN {newer} THEN ep.o ELSE e.last_outcome END, \
                  last_status_code = CASE WHEN {newer} THEN ep.c ELSE e.last_status_code END, \
                  last_at = CASE WHEN {newer} THEN ep.at ELSE e.last_at END \
             FROM ep WHERE e.id = ep.endpoint_id AND e.tenant = ep.tenant) \
         SELECT id FROM res",
        newer = "(ep.at IS NOT NULL AND (e.last_at IS NULL OR ep.at >= e.last_at))",
        lo_code = "CASE WHEN u.lo_outcome IS NULL THEN d.last_status_code ELSE u.lo_code END",
        lo_excerpt = "CASE WHEN u.lo_outcome IS NULL THEN d.last_excerpt ELSE u.lo_excerpt END",
        lo_at = "CASE WHEN u.lo_outcome IS NULL THEN d.last_at ELSE u.lo_at END",
        // A wait for an endpoint that a resume or delete made while the delivery was
        // claimed (`DeliveryUpdate::endpoint_is_back`): pending, due now. Only a `held`
        // verdict waits, so a finishing row never comes back.
        back = format!(
            "(u.awaits AND NOT EXISTS (SELECT 1 FROM {e} x \
               WHERE x.id = (CASE WHEN d.kind = 'webhook' THEN d.target END)::uuid \
                 AND x.tenant = d.tenant AND x.status <> 'active'))"
        ),
    )
}

impl PostgresStore {
    /// `DeliveryStore::complete_many`: [`complete_text`] for every item.
    pub(crate) async fn complete_now(
        &self,
        items: &[(Lease, Completion)],
    ) -> Result<Vec<Result<()>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.inner.clock.now();
        let mut a = CompletionArrays::default();
        // A delivery named twice in one call: only its first item can match.
        let mut seen = HashSet::with_capacity(items.len());
        let mut sent = Vec::with_capacity(items.len());
        for (lease, completion) in items {
            if !seen.insert(lease.delivery_id) {
                sent.push(false);
                continue;
            }
            sent.push(true);
            let u = lease.settle(&completion.verdict, completion.attempt.as_ref(), now);
            a.ids.push(lease.delivery_id.as_uuid());
            a.tokens.push(lease.token.as_uuid());
            a.status.push(u.status.as_str());
            a.attempts.push(int4(u.attempts));
            a.snoozes.push(int4(u.snoozes));
            a.next_at.push(ms(u.next_attempt_at));
            a.completed_at.push(u.completed_at.map(ms));
            a.dead_reason.push(u.dead_reason.map(|r| r.as_str()));
            a.lo_outcome
                .push(u.last_outcome.as_ref().map(|o| o.outcome.as_str()));
            a.lo_code.push(
                u.last_outcome
                    .as_ref()
                    .and_then(|o| o.status_code)
                    .map(i32::from),
            );
            a.lo_excerpt
                .push(u.last_outcome.as_ref().and_then(|o| o.excerpt.clone()));
            a.lo_at.push(u.last_outcome.as_ref().map(|o| ms(o.at)));
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
        }
        let matched: Vec<Uuid> = sqlx::query_scalar(&self.inner.sql.claim.complete)
            .bind(ms(now)) // $1
            .bind(a.ids) // $2
            .bind(a.tokens) // $3
            .bind(a.status) // $4
            .bind(a.attempts) // $5
            .bind(a.snoozes) // $6
            .bind(a.next_at) // $7
            .bind(a.completed_at) // $8
            .bind(a.dead_reason) // $9
            .bind(a.lo_outcome) // $10
            .bind(a.lo_code) // $11
            .bind(a.lo_excerpt) // $12
            .bind(a.lo_at) // $13
            .bind(a.disable) // $14
            .bind(a.a_set) // $15
            .bind(a.a_probe) // $16
            .bind(a.a_started) // $17
            .bind(a.a_finished) // $18
            .bind(a.a_outcome) // $19
            .bind(a.a_code) // $20
            .bind(a.a_excerpt) // $21
            .bind(a.tenants) // $22
            .bind(a.awaits) // $23
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
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

/// The release statement: $1 now, then the arrays $2 ids, $3 tokens, $4 statuses,
/// $5 attempts, $6 due times, $7 tenants, bound by [`PostgresStore::release_now`].
pub(super) fn release_text(t: &Tables) -> String {
    let d = &t.deliveries;
    format!(
        "UPDATE {d} d SET status = u.status, attempts = u.attempts, \
                next_attempt_at = u.next_at, claim_token = NULL, lease_until = NULL, \
                updated_at = $1::int8 \
           FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::int4[], $6::int8[], \
                       $7::text[]) \
                AS u(id, token, status, attempts, next_at, tenant) \
          WHERE d.id = u.id AND d.claim_token = u.token AND d.tenant = u.tenant \
            AND d.status IN ('processing', 'sending') \
         RETURNING d.id"
    )
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
            status.push(u.status.as_str());
            attempts.push(int4(u.attempts));
            next.push(ms(u.next_attempt_at));
            tenants.push(lease.tenant.as_str());
        }
        let released: Vec<Uuid> = sqlx::query_scalar(&self.inner.sql.claim.release)
            .bind(ms(now)) // $1
            .bind(ids) // $2
            .bind(tokens) // $3
            .bind(status) // $4
            .bind(attempts) // $5
            .bind(next) // $6
            .bind(tenants) // $7
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
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

/// Extend a lease: $1 delivery, $2 token, $3 new lease end, $4 now, $5 tenant, bound by
/// [`PostgresStore::extend_now`].
pub(super) fn extend_text(t: &Tables) -> String {
    let d = &t.deliveries;
    format!(
        "UPDATE {d} SET lease_until = $3::int8, next_attempt_at = $3::int8, \
                updated_at = $4::int8 \
          WHERE id = $1::uuid AND claim_token = $2::uuid AND tenant = $5::text \
            AND status IN ('processing', 'sending') \
         RETURNING id"
    )
}

impl PostgresStore {
    /// `DeliveryStore::extend`.
    pub(crate) async fn extend_now(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        let now = self.inner.clock.now();
        let until = now.saturating_add(by);
        let found: Option<Uuid> = sqlx::query_scalar(&self.inner.sql.claim.extend)
            .bind(lease.delivery_id.as_uuid()) // $1
            .bind(lease.token.as_uuid()) // $2
            .bind(ms(until)) // $3
            .bind(ms(now)) // $4
            .bind(lease.tenant.as_str()) // $5
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

/// Mark a claimed delivery as being sent: $1 delivery, $2 token, $3 now, $4 tenant, bound by
/// [`PostgresStore::mark_sending_now`].
pub(super) fn mark_sending_text(t: &Tables) -> String {
    let d = &t.deliveries;
    format!(
        "UPDATE {d} SET status = 'sending', updated_at = $3::int8 \
          WHERE id = $1::uuid AND claim_token = $2::uuid AND tenant = $4::text \
            AND status IN ('processing', 'sending') \
         RETURNING id"
    )
}

impl PostgresStore {
    /// `DeliveryStore::mark_sending`.
    pub(crate) async fn mark_sending_now(&self, lease: &Lease) -> Result<()> {
        let found: Option<Uuid> = sqlx::query_scalar(&self.inner.sql.claim.mark_sending)
            .bind(lease.delivery_id.as_uuid()) // $1
            .bind(lease.token.as_uuid()) // $2
            .bind(ms(self.inner.clock.now())) // $3
            .bind(lease.tenant.as_str()) // $4
            .fetch_optional(&self.inner.pool)
            .await
            .db()?;
        found.map(|_| ()).ok_or_else(Error::lease_lost)
    }
}
