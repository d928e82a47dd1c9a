//! The hot path's statement texts: the fair claim and the completion, release, extend and
//! mark-sending writes (bound by `claim/`).

use std::sync::atomic::AtomicBool;

use crate::rows::{delivery_cols, ROW_COLS, UNFINISHED};
use crate::schema::Tables;

/// The completion statement: $1 now, then one array per field of [`CompletionArrays`], in
/// its order ($2 ids … $23 awaits), bound by [`PostgresStore::complete_now`].
///
/// A row that stays unfinished is updated in place (`upd`); one that finishes (succeeded,
/// dead) is deleted from the hot table (`fin`, its new values computed in `RETURNING`) and
/// appended to the history (`ins`) in the same statement. Both feed the attempt insert and
/// the endpoint's last status.
pub(crate) fn complete_text(t: &Tables) -> String {
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

/// The release statement: $1 now, then the arrays $2 ids, $3 tokens, $4 statuses,
/// $5 attempts, $6 due times, $7 tenants, bound by [`PostgresStore::release_now`].
pub(crate) fn release_text(t: &Tables) -> String {
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

/// Extend a lease: $1 delivery, $2 token, $3 new lease end, $4 now, $5 tenant, bound by
/// [`PostgresStore::extend_now`].
pub(crate) fn extend_text(t: &Tables) -> String {
    let d = &t.deliveries;
    format!(
        "UPDATE {d} SET lease_until = $3::int8, next_attempt_at = $3::int8, \
                updated_at = $4::int8 \
          WHERE id = $1::uuid AND claim_token = $2::uuid AND tenant = $5::text \
            AND status IN ('processing', 'sending') \
         RETURNING id"
    )
}

/// Mark a claimed delivery as being sent: $1 delivery, $2 token, $3 now, $4 tenant, bound by
/// [`PostgresStore::mark_sending_now`].
pub(crate) fn mark_sending_text(t: &Tables) -> String {
    let d = &t.deliveries;
    format!(
        "UPDATE {d} SET status = 'sending', updated_at = $3::int8 \
          WHERE id = $1::uuid AND claim_token = $2::uuid AND tenant = $4::text \
            AND status IN ('processing', 'sending') \
         RETURNING id"
    )
}

/// The hot-path statements of one store.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) claim: String,
    pub(crate) complete: String,
    pub(crate) release: String,
    pub(crate) extend: String,
    pub(crate) mark_sending: String,
    /// Whether the next claim may use the cached generic plan (see [`claim_mode`]): the
    /// last claim filled its batch and the hot table was at least [`GENERIC_MIN_BYTES`].
    pub(crate) generic: AtomicBool,
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

/// The claim's attempt budget for the delivery aliased `d` (NULL when not served).
pub(crate) fn budget(d: &str) -> String {
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
pub(crate) fn claimable(d: &str) -> String {
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
pub(crate) fn claim_text(t: &Tables) -> String {
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
