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

mod settle;

use settle::{complete_text, extend_text, mark_sending_text, release_text};

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
