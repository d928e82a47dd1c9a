-- The hot path (`DeliveryStore`, bound by `claim/`): the fair claim, and the completion,
-- release, extend and mark-sending writes, each fenced by the claim's token. Every time is a
-- parameter from the injected clock. `{row_cols}` is every column of a delivery row in table
-- order (the hot table's and the history's), `{delivery_cols}` the columns a delivery is read
-- from.

-- name: claim
-- The fair claim (DESIGN §6, core's `claim_rules`). Its steps:
-- 1. `exhausted`/`killed`/`buried`: rows that spent their budget become `dead` (at most
--    core's EXHAUSTED_PER_CLAIM per claim), found through the small `deliveries_spent`
--    index, and move from the hot table to the history.
-- 2. `groups`: every (tenant, kind, target) with unfinished rows, by a skip scan of the
--    `deliveries_group` index (one index probe per group, whatever its backlog).
-- 3. `heads`: of the groups this claim serves (and does not exclude), those with a claimable
--    due row, the :batch whose oldest such row is oldest (only they can get a turn). The limit
--    is written `(SELECT :batch)` on purpose: the planner then guesses a few groups, which
--    keeps its estimate of the per-group scans low (with a plain LIMIT a claim of 100 was
--    estimated at 290k and, with JIT on, spent 155 ms compiling JIT code for a 5 ms execution;
--    the claim's transaction also turns JIT off).
-- 4. `picked`: from each of those groups, its first claimable rows in (due, enqueue order),
--    locked with SKIP LOCKED: at most :batch - k + 1 each when k groups take part (a group can
--    get no more: every other group gets one first); an endpoint's group no more than its room
--    (:rooms of :room_endpoints) or the per-endpoint limit (:endpoint_limit, NULL: none).
-- 5. `chosen`: rounds (each group's first row, then each group's second, ...), groups in the
--    order of their first picked row, cut at :batch; locked rows not chosen are released when
--    the statement ends.
-- 6. `claimed`: the update (token, lease, attempt), returned with the message columns.
-- Claimable (core's rule, the same in `heads` and `picked`, so a group whose due rows all wait
-- counts for no share of the batch): within its budget (a held probe spends none) and not
-- behind an older unfinished row of its ordering key whose topic is not dormant (an older row
-- that dies at this claim does not hold it back). A row's budget is its source's: the
-- handler's in :budgets (by :consumers), :webhook_budget or :email_budget; NULL when the claim
-- does not serve it.
WITH RECURSIVE exhausted AS (
  SELECT d.id FROM {deliveries} d
   WHERE d.attempts > 0 AND d.status IN ('pending', 'processing', 'sending')
     AND d.attempts >= :min_budget::int4 AND d.next_attempt_at <= :now::int8
     AND d.attempts >= (CASE d.kind
           WHEN 'handler' THEN (:budgets::int4[])[array_position(:consumers::text[], d.target)]
           WHEN 'webhook' THEN :webhook_budget::int4
           WHEN 'email' THEN :email_budget::int4 END)
     AND NOT (d.kind = 'webhook' AND d.target = ANY(:excluded::text[]))
   ORDER BY d.attempts DESC
   LIMIT {exhausted_bound}
   FOR UPDATE OF d SKIP LOCKED),
killed AS (
  DELETE FROM {deliveries} d USING exhausted x
   WHERE d.id = ANY (ARRAY(SELECT e.id FROM exhausted e)) AND d.id = x.id
  RETURNING d.seq, d.id, d.message_id, d.tenant, d.topic, d.ordering_key, d.kind,
            d.target, 'dead'::text AS status, d.attempts, d.snoozes,
            d.next_attempt_at, NULL::int8 AS lease_until,
            NULL::uuid AS claim_token, d.last_outcome, d.last_status_code,
            d.last_excerpt, d.last_at, 'max_attempts'::text AS dead_reason,
            d.ledger_len, d.created_at, :now::int8 AS updated_at,
            :now::int8 AS completed_at, d.run, d.due_at),
buried AS (INSERT INTO {done} ({row_cols}) SELECT {row_cols} FROM killed),
groups AS (
  (SELECT d.tenant, d.kind, d.target FROM {deliveries} d
    WHERE d.status IN ('pending', 'held', 'processing', 'sending')
    ORDER BY d.tenant, d.kind, d.target LIMIT 1)
  UNION ALL
  SELECT n.tenant, n.kind, n.target FROM groups g CROSS JOIN LATERAL (
    SELECT d.tenant, d.kind, d.target FROM {deliveries} d
     WHERE d.status IN ('pending', 'held', 'processing', 'sending')
       AND (d.tenant, d.kind, d.target) > (g.tenant, g.kind, g.target)
     ORDER BY d.tenant, d.kind, d.target LIMIT 1) n),
heads AS (
  SELECT g.tenant, g.kind, g.target FROM groups g CROSS JOIN LATERAL (
    SELECT d.next_attempt_at, d.seq FROM {deliveries} d
     WHERE d.tenant = g.tenant AND d.kind = g.kind AND d.target = g.target
       AND d.status IN ('pending', 'held', 'processing', 'sending')
       AND d.next_attempt_at <= :now::int8
       AND (d.status = 'held' OR d.attempts < (CASE d.kind
             WHEN 'handler' THEN (:budgets::int4[])[array_position(:consumers::text[], d.target)]
             WHEN 'webhook' THEN :webhook_budget::int4
             WHEN 'email' THEN :email_budget::int4 END))
       AND (d.ordering_key IS NULL OR NOT EXISTS (
             SELECT 1 FROM {deliveries} p
              WHERE p.tenant = d.tenant AND p.kind = d.kind AND p.target = d.target
                AND p.ordering_key = d.ordering_key AND p.seq < d.seq
                AND p.status IN ('pending', 'held', 'processing', 'sending')
                AND p.topic <> ALL(:dormant::text[])
                AND NOT (p.status <> 'held' AND p.next_attempt_at <= :now::int8
                         AND p.attempts >= (CASE p.kind
                   WHEN 'handler' THEN (:budgets::int4[])[array_position(:consumers::text[], p.target)]
                   WHEN 'webhook' THEN :webhook_budget::int4
                   WHEN 'email' THEN :email_budget::int4 END))))
     ORDER BY d.next_attempt_at, d.seq LIMIT 1) h
   WHERE (CASE g.kind
           WHEN 'handler' THEN (:budgets::int4[])[array_position(:consumers::text[], g.target)]
           WHEN 'webhook' THEN :webhook_budget::int4
           WHEN 'email' THEN :email_budget::int4 END) IS NOT NULL
     AND NOT (g.kind = 'webhook' AND g.target = ANY(:excluded::text[]))
   ORDER BY h.next_attempt_at, h.seq
   LIMIT (SELECT :batch::int8)),
share AS (SELECT greatest(:batch::int8 - count(*) + 1, 1) AS n FROM heads),
picked AS (
  SELECT p.* FROM heads h CROSS JOIN share CROSS JOIN LATERAL (
    SELECT d.id, d.tenant, d.kind, d.target, d.status AS claimed_from,
           d.next_attempt_at AS due_at, d.seq
      FROM {deliveries} d
     WHERE d.tenant = h.tenant AND d.kind = h.kind AND d.target = h.target
       AND d.status IN ('pending', 'held', 'processing', 'sending')
       AND d.next_attempt_at <= :now::int8
       AND (d.status = 'held' OR d.attempts < (CASE d.kind
             WHEN 'handler' THEN (:budgets::int4[])[array_position(:consumers::text[], d.target)]
             WHEN 'webhook' THEN :webhook_budget::int4
             WHEN 'email' THEN :email_budget::int4 END))
       AND (d.ordering_key IS NULL OR NOT EXISTS (
             SELECT 1 FROM {deliveries} p
              WHERE p.tenant = d.tenant AND p.kind = d.kind AND p.target = d.target
                AND p.ordering_key = d.ordering_key AND p.seq < d.seq
                AND p.status IN ('pending', 'held', 'processing', 'sending')
                AND p.topic <> ALL(:dormant::text[])
                AND NOT (p.status <> 'held' AND p.next_attempt_at <= :now::int8
                         AND p.attempts >= (CASE p.kind
                   WHEN 'handler' THEN (:budgets::int4[])[array_position(:consumers::text[], p.target)]
                   WHEN 'webhook' THEN :webhook_budget::int4
                   WHEN 'email' THEN :email_budget::int4 END))))
     ORDER BY d.next_attempt_at, d.seq
     LIMIT CASE WHEN h.kind = 'webhook' THEN least(share.n, coalesce(
             (:rooms::int8[])[array_position(:room_endpoints::text[], h.target)],
             :endpoint_limit::int8))
           ELSE share.n END
     FOR UPDATE OF d SKIP LOCKED) p),
rounds AS (
  SELECT picked.*,
         row_number() OVER w AS round,
         first_value(due_at) OVER w AS g_due, first_value(seq) OVER w AS g_seq
    FROM picked
  WINDOW w AS (PARTITION BY tenant, kind, target ORDER BY due_at, seq)),
chosen AS (
  SELECT rounds.*,
         (row_number() OVER (ORDER BY round, g_due, g_seq))::int4 AS rn
    FROM rounds
   ORDER BY round, g_due, g_seq
   LIMIT :batch::int8),
claimed AS (
  UPDATE {deliveries} d SET status = 'processing',
         attempts = d.attempts + CASE WHEN n.claimed_from = 'held' THEN 0 ELSE 1 END,
         claim_token = (:tokens::uuid[])[n.rn], lease_until = :until::int8,
         due_at = n.due_at,
         next_attempt_at = :until::int8, updated_at = :now::int8
    FROM chosen n
   WHERE d.id = ANY (ARRAY(SELECT c.id FROM chosen c)) AND d.id = n.id
  RETURNING {delivery_cols}, d.claim_token, n.claimed_from, n.rn)
SELECT c.*, m.payload AS m_payload, m.idempotency_key AS m_idempotency_key,
       m.available_at AS m_available_at, m.headers AS m_headers,
       m.cause AS m_cause, m.created_at AS m_created_at,
       (SELECT pg_relation_size({deliveries_literal}::regclass)) AS hot_bytes
  FROM claimed c JOIN {messages} m ON m.id = c.message_id
 ORDER BY c.rn

-- name: complete
-- One completion per element of the arrays (a batch). A row that stays unfinished is updated
-- in place (`upd`); one that finishes (succeeded, dead) is deleted from the hot table (`fin`,
-- its new values computed in RETURNING) and appended to the history (`ins`) in the same
-- statement. Both feed the attempt insert and the endpoint's last status. A wait for an
-- endpoint that a resume or delete made while the delivery was claimed (`awaits`, core's
-- `DeliveryUpdate::endpoint_is_back`) comes back pending, due now; only a `held` verdict
-- waits, so a finishing row never comes back. Returns the ids that matched their lease.
WITH u AS (
  SELECT * FROM unnest(:ids::uuid[], :tokens::uuid[], :statuses::text[], :attempts::int4[],
                       :snoozes::int4[], :next_at::int8[], :completed_at::int8[],
                       :dead_reasons::text[], :lo_outcomes::text[], :lo_codes::int4[],
                       :lo_excerpts::text[], :lo_at::int8[], :disable::bool[],
                       :a_set::bool[], :a_probe::bool[], :a_started::int8[],
                       :a_finished::int8[], :a_outcomes::text[], :a_codes::int4[],
                       :a_excerpts::text[], :tenants::text[], :awaits::bool[])
    AS u(id, token, status, attempts, snoozes, next_at, completed_at, dead_reason,
         lo_outcome, lo_code, lo_excerpt, lo_at, disable,
         a_set, a_probe, a_started, a_finished, a_outcome, a_code, a_excerpt,
         tenant, awaits)),
upd AS (
  UPDATE {deliveries} d SET
         status = CASE WHEN (u.awaits AND NOT EXISTS (SELECT 1 FROM {endpoints} x
                    WHERE x.id = (CASE WHEN d.kind = 'webhook' THEN d.target END)::uuid
                      AND x.tenant = d.tenant AND x.status <> 'active'))
                  THEN 'pending' ELSE u.status END,
         attempts = u.attempts, snoozes = u.snoozes,
         next_attempt_at = CASE WHEN (u.awaits AND NOT EXISTS (SELECT 1 FROM {endpoints} x
                    WHERE x.id = (CASE WHEN d.kind = 'webhook' THEN d.target END)::uuid
                      AND x.tenant = d.tenant AND x.status <> 'active'))
                  THEN :now::int8 ELSE u.next_at END,
         completed_at = u.completed_at,
         dead_reason = u.dead_reason,
         last_outcome = coalesce(u.lo_outcome, d.last_outcome),
         last_status_code = CASE WHEN u.lo_outcome IS NULL THEN d.last_status_code ELSE u.lo_code END,
         last_excerpt = CASE WHEN u.lo_outcome IS NULL THEN d.last_excerpt ELSE u.lo_excerpt END,
         last_at = CASE WHEN u.lo_outcome IS NULL THEN d.last_at ELSE u.lo_at END,
         claim_token = NULL, lease_until = NULL, updated_at = :now::int8,
         ledger_len = d.ledger_len + CASE WHEN u.a_set THEN 1 ELSE 0 END
    FROM u
   WHERE d.id = u.id AND d.claim_token = u.token AND d.tenant = u.tenant
     AND d.status IN ('processing', 'sending')
     AND NOT u.status IN ('succeeded', 'dead')
  RETURNING d.id, d.tenant, d.ledger_len, d.run, d.due_at,
            CASE WHEN d.kind = 'webhook' THEN d.target::uuid END AS endpoint_id,
            u.disable, u.a_set, u.a_probe, u.a_started, u.a_finished,
            u.a_outcome, u.a_code, u.a_excerpt),
fin AS (
  DELETE FROM {deliveries} d USING u
   WHERE d.id = u.id AND d.claim_token = u.token AND d.tenant = u.tenant
     AND d.status IN ('processing', 'sending')
     AND u.status IN ('succeeded', 'dead')
  RETURNING d.seq, d.id, d.message_id, d.tenant, d.topic, d.ordering_key, d.kind,
            d.target, u.status, u.attempts, u.snoozes,
            u.next_at AS next_attempt_at, NULL::int8 AS lease_until,
            NULL::uuid AS claim_token,
            coalesce(u.lo_outcome, d.last_outcome) AS last_outcome,
            CASE WHEN u.lo_outcome IS NULL THEN d.last_status_code ELSE u.lo_code END
              AS last_status_code,
            CASE WHEN u.lo_outcome IS NULL THEN d.last_excerpt ELSE u.lo_excerpt END
              AS last_excerpt,
            CASE WHEN u.lo_outcome IS NULL THEN d.last_at ELSE u.lo_at END AS last_at,
            u.dead_reason,
            d.ledger_len + CASE WHEN u.a_set THEN 1 ELSE 0 END AS ledger_len,
            d.created_at, :now::int8 AS updated_at, u.completed_at, d.run, d.due_at,
            CASE WHEN d.kind = 'webhook' THEN d.target::uuid END AS endpoint_id,
            u.disable, u.a_set, u.a_probe, u.a_started, u.a_finished,
            u.a_outcome, u.a_code, u.a_excerpt),
ins AS (INSERT INTO {done} ({row_cols}) SELECT {row_cols} FROM fin),
res AS (
  SELECT id, tenant, ledger_len, run, due_at, endpoint_id, disable, a_set, a_probe,
         a_started, a_finished, a_outcome, a_code, a_excerpt FROM upd
  UNION ALL
  SELECT id, tenant, ledger_len, run, due_at, endpoint_id, disable, a_set, a_probe,
         a_started, a_finished, a_outcome, a_code, a_excerpt FROM fin),
att AS (
  INSERT INTO {attempts} (delivery_id, number, tenant, probe, started_at, finished_at,
                          outcome, status_code, excerpt, run, scheduled_at)
  SELECT id, ledger_len, tenant, a_probe, a_started, a_finished, a_outcome, a_code,
         a_excerpt, run, due_at
    FROM res WHERE a_set),
ep AS (
  SELECT endpoint_id, tenant, bool_or(disable) AS gone,
         (array_agg(a_outcome ORDER BY a_finished DESC) FILTER (WHERE a_set))[1] AS o,
         (array_agg(a_code ORDER BY a_finished DESC) FILTER (WHERE a_set))[1] AS c,
         max(a_finished) FILTER (WHERE a_set) AS at
    FROM res WHERE endpoint_id IS NOT NULL AND (disable OR a_set)
   GROUP BY endpoint_id, tenant),
dis AS (
  UPDATE {endpoints} e SET
         status = CASE WHEN ep.gone THEN 'disabled' ELSE e.status END,
         disabled_reason = CASE WHEN ep.gone THEN 'gone' ELSE e.disabled_reason END,
         updated_at = CASE WHEN ep.gone THEN :now::int8 ELSE e.updated_at END,
         last_outcome = CASE WHEN (ep.at IS NOT NULL AND (e.last_at IS NULL OR ep.at >= e.last_at))
                        THEN ep.o ELSE e.last_outcome END,
         last_status_code = CASE WHEN (ep.at IS NOT NULL AND (e.last_at IS NULL OR ep.at >= e.last_at))
                            THEN ep.c ELSE e.last_status_code END,
         last_at = CASE WHEN (ep.at IS NOT NULL AND (e.last_at IS NULL OR ep.at >= e.last_at))
                   THEN ep.at ELSE e.last_at END
    FROM ep WHERE e.id = ep.endpoint_id AND e.tenant = ep.tenant)
SELECT id FROM res

-- name: release
-- Leases given back unattempted (core's `Lease::release`), one per element; returns the ids
-- that matched their lease.
UPDATE {deliveries} d SET status = u.status, attempts = u.attempts,
       next_attempt_at = u.next_at, claim_token = NULL, lease_until = NULL,
       updated_at = :now::int8
  FROM unnest(:ids::uuid[], :tokens::uuid[], :statuses::text[], :attempts::int4[],
              :next_at::int8[], :tenants::text[])
       AS u(id, token, status, attempts, next_at, tenant)
 WHERE d.id = u.id AND d.claim_token = u.token AND d.tenant = u.tenant
   AND d.status IN ('processing', 'sending')
RETURNING d.id

-- name: extend
-- A lease ends at :until instead (which is also when a stranded claim is due again).
UPDATE {deliveries} SET lease_until = :until::int8, next_attempt_at = :until::int8,
       updated_at = :now::int8
 WHERE id = :delivery::uuid AND claim_token = :token::uuid AND tenant = :tenant::text
   AND status IN ('processing', 'sending')
RETURNING id

-- name: mark_sending
-- A claimed delivery is being sent (an e-mail's send began).
UPDATE {deliveries} SET status = 'sending', updated_at = :now::int8
 WHERE id = :delivery::uuid AND claim_token = :token::uuid AND tenant = :tenant::text
   AND status IN ('processing', 'sending')
RETURNING id
