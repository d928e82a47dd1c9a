//! The hot path of `DeliveryStore`: claim in one statement, then complete, release, extend
//! or mark sending, in batches where the engine batches, fenced by claim tokens.
//!
//! # Cancel safety
//!
//! The claim is one statement in a short transaction, every other method one statement on a
//! pooled connection. Dropping a future before it returns may leave its change applied or
//! not: a claim dropped before its commit claims nothing; one committed but never seen
//! leaves its deliveries leased until the lease ends, when they are claimable again (the
//! attempt it spent counts); a completion or release that was applied changes the delivery
//! as asked, one that was not leaves it leased. Nothing is half-applied.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, ClaimToken, Claimed, Completion, Error, ErrorKind, Lease, ReleaseReport, Result,
};
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::error::DbResult;
use crate::rows::{self, delivery_cols, get, int4, ms, ROW_COLS, UNFINISHED};
use crate::schema::Tables;
use crate::store::PostgresStore;

/// The hot-path statements of one store.
#[derive(Debug)]
pub(crate) struct Sql {
    claim: String,
    complete: String,
    release: String,
    extend: String,
    mark_sending: String,
    /// Whether the next claim may use the cached generic plan (see [`claim_mode`]): the
    /// last claim filled its batch and the hot table was at least [`GENERIC_MIN_BYTES`].
    generic: AtomicBool,
}

impl Sql {
    pub fn new(t: &Tables) -> Self {
        Sql {
            claim: claim_text(t),
            complete: complete_text(t),
            release: release_text(t),
            extend: extend_text(t),
            mark_sending: mark_sending_text(t),
            generic: AtomicBool::new(false),
        }
    }
}

/// The claim's transaction, opened in one round trip with the planner settings of its one
/// statement. JIT is always off: the statement's cost estimate (a backlog's rows per
/// group) easily crosses `jit_above_cost`, and JIT compilation was measured at 155 ms for
/// a 5 ms execution.
///
/// Custom plans (re-planned on every call, 1.3–3 ms of planning for this statement) are
/// the default. A generic plan (planned once per connection, then ~0.2 ms) is used only
/// while a backlog is being worked off ([`Sql::generic`]): a generic plan is frozen with
/// the table size it was planned at, and one planned on an empty or tiny hot table
/// chooses sequential scans and unindexed joins that took 7–17 s per claim once 100k rows
/// had arrived. Planned at ≥ 1 MiB (with sequential scans disabled for the statement, so
/// every access is an index probe), the same generic plan measured as fast as the custom
/// one on a 100k backlog in 1 and in 51 groups. A cached generic plan is replanned when
/// the table's statistics change (vacuum, analyze); it is only ever used, and so only
/// ever replanned, under the same condition.
fn claim_mode(generic: bool) -> &'static str {
    if generic {
        "BEGIN; SET LOCAL jit = off; SET LOCAL plan_cache_mode = force_generic_plan; \
         SET LOCAL enable_seqscan = off"
    } else {
        "BEGIN; SET LOCAL jit = off; SET LOCAL plan_cache_mode = force_custom_plan"
    }
}

/// The hot table size from which a full claim lets the next one use the generic plan.
const GENERIC_MIN_BYTES: i64 = 1 << 20;

/// The claim's attempt budget for the delivery aliased `d` (NULL when not served).
fn budget(d: &str) -> String {
    format!(
        "(CASE {d}.kind \
            WHEN 'handler' THEN ($4::int4[])[array_position($3::text[], {d}.target)] \
            WHEN 'webhook' THEN $5::int4 \
            WHEN 'email' THEN $6::int4 END)"
    )
}

/// The predicate on a due row `d` that core's claim rules (`outboxkit_core::claim_rules`)
/// call claimable: within its budget (a held probe spends none) and not behind an older
/// unfinished row of its ordering key whose topic is not dormant (an older row that dies
/// at this claim does not hold it back). The group heads and the picked rows use the same
/// predicate, so a group whose due rows all wait counts for no share of the batch.
fn claimable(d: &str) -> String {
    format!(
        "(d.status = 'held' OR d.attempts < {bd}) \
         AND (d.ordering_key IS NULL OR NOT EXISTS ( \
               SELECT 1 FROM {d} p \
                WHERE p.tenant = d.tenant AND p.kind = d.kind AND p.target = d.target \
                  AND p.ordering_key = d.ordering_key AND p.seq < d.seq \
                  AND p.status IN {UNFINISHED} \
                  AND p.topic <> ALL($7::text[]) \
                  AND NOT (p.status <> 'held' AND p.next_attempt_at <= $1::int8 \
                           AND p.attempts >= {bp})))",
        bd = budget("d"),
        bp = budget("p"),
    )
}

/// The claim statement. Parameters, bound in this order by [`PostgresStore::claim_now`]:
/// $1 now, $2 batch, $3 consumers, $4 their budgets, $5 webhook budget, $6 e-mail budget,
/// $7 dormant topics, $8 tokens, $9 lease end, $10 smallest budget, $11 excluded
/// endpoints (ids as text), $12 endpoints with a room of their own, $13 their rooms,
/// $14 the per-endpoint limit of the others (NULL: none).
///
/// Its steps:
/// 1. `exhausted`/`killed`/`buried`: rows that spent their budget become `dead` (at most
///    core's `EXHAUSTED_PER_CLAIM`, 1,000, per claim), found through the small `deliveries_spent` index, and move from the
///    hot table to the history.
/// 2. `groups`: every (tenant, kind, target) with unfinished rows, by a skip scan of the
///    `deliveries_group` index (one index probe per group, whatever its backlog).
/// 3. `heads`: of the groups this claim serves (and does not exclude), those with a
///    claimable due row ([`claimable`]), the `$2` whose oldest such row is oldest (only they can get a turn). The limit is
///    written `(SELECT $2)` on purpose: the planner then guesses a few groups instead of
///    `$2`, which keeps its estimate of the per-group scans low (with `LIMIT $2` a claim of
///    100 was estimated at 290k and, with JIT on, spent 155 ms compiling JIT code for a 5 ms
///    execution; [`PostgresStore::claim_now`] also turns JIT off).
/// 4. `picked`: from each of those groups, its first claimable rows in (due, enqueue order),
///    behind the per-key barrier, locked with `SKIP LOCKED`: at most `$2 - k + 1` each when
///    `k` groups take part (a group can get no more: every other group gets one first), so
///    a 100k backlog costs as much as any other group; an endpoint's group no more than its
///    room (`$13`) or the per-endpoint limit (`$14`).
/// 5. `chosen`: rounds — each group's first row, then each group's second, … — groups in the
///    order of their first picked row, cut at `$2`; locked rows not chosen are released when
///    the statement ends.
/// 6. `claimed`: the update (token, lease, attempt), returned with the message columns.
fn claim_text(t: &Tables) -> String {
    let (d, m, done) = (&t.deliveries, &t.messages, &t.done);
    let dcols = delivery_cols("d");
    let excluded_endpoint =
        |x: &str| format!("({x}.kind = 'webhook' AND {x}.target = ANY($11::text[]))");
    format!(
        "WITH RECURSIVE exhausted AS ( \
           SELECT d.id FROM {d} d \
            WHERE d.attempts > 0 AND d.status IN ('pending', 'processing', 'sending') \
              AND d.attempts >= $10::int4 AND d.next_attempt_at <= $1::int8 \
              AND d.attempts >= {bd} \
              AND NOT {xd} \
            ORDER BY d.attempts DESC \
            LIMIT {exhausted_bound} \
            FOR UPDATE OF d SKIP LOCKED), \
         killed AS ( \
           DELETE FROM {d} d USING exhausted x \
            WHERE d.id = ANY (ARRAY(SELECT e.id FROM exhausted e)) AND d.id = x.id \
           RETURNING d.seq, d.id, d.message_id, d.tenant, d.topic, d.ordering_key, d.kind, \
                     d.target, 'dead'::text AS status, d.attempts, d.snoozes, \
                     d.next_attempt_at, NULL::int8 AS lease_until, \
                     NULL::uuid AS claim_token, d.last_outcome, d.last_status_code, \
                     d.last_excerpt, d.last_at, 'max_attempts'::text AS dead_reason, \
                     d.ledger_len, d.created_at, $1::int8 AS updated_at, \
                     $1::int8 AS completed_at, d.run, d.due_at), \
         buried AS (INSERT INTO {done} ({ROW_COLS}) SELECT {ROW_COLS} FROM killed), \
         groups AS ( \
           (SELECT d.tenant, d.kind, d.target FROM {d} d \
             WHERE d.status IN {UNFINISHED} \
             ORDER BY d.tenant, d.kind, d.target LIMIT 1) \
           UNION ALL \
           SELECT n.tenant, n.kind, n.target FROM groups g CROSS JOIN LATERAL ( \
             SELECT d.tenant, d.kind, d.target FROM {d} d \
              WHERE d.status IN {UNFINISHED} \
                AND (d.tenant, d.kind, d.target) > (g.tenant, g.kind, g.target) \
              ORDER BY d.tenant, d.kind, d.target LIMIT 1) n), \
         heads AS ( \
           SELECT g.tenant, g.kind, g.target FROM groups g CROSS JOIN LATERAL ( \
             SELECT d.next_attempt_at, d.seq FROM {d} d \
              WHERE d.tenant = g.tenant AND d.kind = g.kind AND d.target = g.target \
                AND d.status IN {UNFINISHED} AND d.next_attempt_at <= $1::int8 \
                AND {claimable} \
              ORDER BY d.next_attempt_at, d.seq LIMIT 1) h \
            WHERE {bg} IS NOT NULL AND NOT {xg} \
            ORDER BY h.next_attempt_at, h.seq \
            LIMIT (SELECT $2::int8)), \
         share AS (SELECT greatest($2::int8 - count(*) + 1, 1) AS n FROM heads), \
         picked AS ( \
           SELECT p.* FROM heads h CROSS JOIN share CROSS JOIN LATERAL ( \
             SELECT d.id, d.tenant, d.kind, d.target, d.status AS claimed_from, \
                    d.next_attempt_at AS due_at, d.seq \
               FROM {d} d \
              WHERE d.tenant = h.tenant AND d.kind = h.kind AND d.target = h.target \
                AND d.status IN {UNFINISHED} \
                AND d.next_attempt_at <= $1::int8 \
                AND {claimable} \
              ORDER BY d.next_attempt_at, d.seq \
              LIMIT CASE WHEN h.kind = 'webhook' THEN least(share.n, coalesce( \
                      ($13::int8[])[array_position($12::text[], h.target)], $14::int8)) \
                    ELSE share.n END \
              FOR UPDATE OF d SKIP LOCKED) p), \
         rounds AS ( \
           SELECT picked.*, \
                  row_number() OVER w AS round, \
                  first_value(due_at) OVER w AS g_due, first_value(seq) OVER w AS g_seq \
             FROM picked \
           WINDOW w AS (PARTITION BY tenant, kind, target ORDER BY due_at, seq)), \
         chosen AS ( \
           SELECT rounds.*, \
                  (row_number() OVER (ORDER BY round, g_due, g_seq))::int4 AS rn \
             FROM rounds \
            ORDER BY round, g_due, g_seq \
            LIMIT $2::int8), \
         claimed AS ( \
           UPDATE {d} d SET status = 'processing', \
                  attempts = d.attempts + CASE WHEN n.claimed_from = 'held' THEN 0 ELSE 1 END, \
                  claim_token = ($8::uuid[])[n.rn], lease_until = $9::int8, \
                  due_at = n.due_at, \
                  next_attempt_at = $9::int8, updated_at = $1::int8 \
             FROM chosen n \
            WHERE d.id = ANY (ARRAY(SELECT c.id FROM chosen c)) AND d.id = n.id \
           RETURNING {dcols}, d.claim_token, n.claimed_from, n.rn) \
         SELECT c.*, m.payload AS m_payload, m.idempotency_key AS m_idempotency_key, \
                m.available_at AS m_available_at, m.headers AS m_headers, \
                m.cause AS m_cause, m.created_at AS m_created_at, \
                (SELECT pg_relation_size('{d}'::regclass)) AS hot_bytes \
           FROM claimed c JOIN {m} m ON m.id = c.message_id \
          ORDER BY c.rn",
        bd = budget("d"),
        bg = budget("g"),
        claimable = claimable(&t.deliveries),
        exhausted_bound = outboxkit_core::claim_rules::EXHAUSTED_PER_CLAIM,
        xd = excluded_endpoint("d"),
        xg = excluded_endpoint("g"),
    )
}

fn claimed(row: &PgRow) -> Result<Claimed> {
    let delivery = rows::delivery(row)?;
    let message = rows::claimed_message(row, &delivery)?;
    let token: Uuid = get(row, "claim_token")?;
    let claimed_from: String = get(row, "claimed_from")?;
    let lease = Lease {
        delivery_id: delivery.id,
        tenant: delivery.tenant.clone(),
        token: ClaimToken::from_uuid(token),
        until: delivery
            .lease_until
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "a claimed row has no lease"))?,
        attempts: delivery.attempts,
        snoozes: delivery.snoozes,
        claimed_from: rows::status(&claimed_from)?,
    };
    Ok(Claimed {
        lease,
        delivery,
        message,
    })
}

impl PostgresStore {
    /// `DeliveryStore::claim`: [`claim_text`] with fresh tokens from the injected entropy.
    pub(crate) async fn claim_now(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        request.validate()?;
        let now = self.inner.clock.now();
        let until = now.saturating_add(request.lease());
        let batch = request.batch_size() as usize;
        let (consumers, budgets): (Vec<&str>, Vec<i32>) = request
            .consumers()
            .map(|(c, b)| (c.as_str(), int4(b)))
            .unzip();
        let min_budget = request
            .consumers()
            .map(|(_, b)| b)
            .chain(request.webhook_budget())
            .chain(request.email_budget())
            .min()
            .unwrap_or(1);
        let dormant: Vec<&str> = request.dormant().iter().map(|t| t.as_str()).collect();
        let excluded_endpoints: Vec<String> = request
            .excluded_endpoints()
            .iter()
            .map(ToString::to_string)
            .collect();
        let (room_endpoints, rooms): (Vec<String>, Vec<i64>) = request
            .endpoint_rooms()
            .iter()
            .map(|(e, n)| (e.to_string(), i64::from(*n)))
            .unzip();
        let sql = &self.inner.sql.claim;
        let generic = sql.generic.load(Ordering::Relaxed);
        let mut tx = self.inner.pool.begin_with(claim_mode(generic)).await.db()?;
        let found = sqlx::query(&sql.claim)
            .bind(ms(now)) // $1
            .bind(batch as i64) // $2
            .bind(consumers) // $3
            .bind(budgets) // $4
            .bind(request.webhook_budget().map(int4)) // $5
            .bind(request.email_budget().map(int4)) // $6
            .bind(dormant) // $7
            .bind(self.tokens(batch)) // $8
            .bind(ms(until)) // $9
            .bind(int4(min_budget)) // $10
            .bind(excluded_endpoints) // $11
            .bind(room_endpoints) // $12
            .bind(rooms) // $13
            .bind(request.default_endpoint_limit().map(i64::from)) // $14
            .fetch_all(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        let hot_bytes: i64 = match found.first() {
            Some(row) => get(row, "hot_bytes")?,
            None => 0,
        };
        sql.generic.store(
            found.len() == batch && hot_bytes >= GENERIC_MIN_BYTES,
            Ordering::Relaxed,
        );
        found.iter().map(claimed).collect()
    }

    /// Whether the next claim will run on the cached generic plan of the claim statement
    /// (a backlog is being worked off; see the crate's README). For tests and diagnostics.
    #[doc(hidden)]
    pub fn claim_plan_is_generic(&self) -> bool {
        self.inner.sql.claim.generic.load(Ordering::Relaxed)
    }

    /// `n` fresh claim tokens from the injected entropy, one fill for the whole batch.
    fn tokens(&self, n: usize) -> Vec<Uuid> {
        let mut bytes = vec![0u8; 16 * n];
        self.inner.entropy.fill(&mut bytes);
        bytes
            .chunks_exact(16)
            .map(|c| {
                let mut b = [0u8; 16];
                b.copy_from_slice(c);
                uuid::Builder::from_random_bytes(b).into_uuid()
            })
            .collect()
    }
}

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
fn complete_text(t: &Tables) -> String {
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
fn release_text(t: &Tables) -> String {
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
fn extend_text(t: &Tables) -> String {
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
fn mark_sending_text(t: &Tables) -> String {
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
