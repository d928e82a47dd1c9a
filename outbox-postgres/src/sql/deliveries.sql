-- The operator's changes and counts (`OperatorStore`, bound by `deliveries.rs`; the endpoint
-- changes in `endpoints.rs` run `release_held` and `hold_for_endpoint` in their transactions).
-- A change that may make work due returns `n` (rows changed) and NOTIFYs `:channel` when n > 0.

-- name: release_held
-- An endpoint's held deliveries become due now.
WITH u AS (
  UPDATE {deliveries} SET status = 'pending', next_attempt_at = :now, updated_at = :now
   WHERE status = 'held' AND target = :endpoint AND kind = 'webhook' AND tenant = :tenant
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: hold_for_endpoint
-- An endpoint's waiting deliveries are held until :until (a paused or disabled endpoint).
UPDATE {deliveries} SET status = 'held', next_attempt_at = :until, updated_at = :now
 WHERE status IN ('pending', 'held') AND target = :endpoint AND kind = 'webhook'
   AND tenant = :tenant

-- name: replay
-- A dead delivery moves from the history back to the hot table, in its first place in
-- enqueue order (same `seq`), with a fresh run.
WITH x AS (
  DELETE FROM {done} WHERE id = :delivery AND tenant = :tenant AND status = 'dead'
  RETURNING *),
u AS (
  INSERT INTO {deliveries} (seq, id, message_id, tenant, topic, ordering_key, kind, target,
         status, attempts, snoozes, next_attempt_at, lease_until, claim_token, last_outcome,
         last_status_code, last_excerpt, last_at, dead_reason, ledger_len, created_at,
         updated_at, completed_at, run, due_at)
  SELECT seq, id, message_id, tenant, topic, ordering_key, kind, target, 'pending',
         0, 0, :now, NULL, NULL, last_outcome, last_status_code, last_excerpt,
         last_at, NULL, ledger_len, created_at, :now, NULL, run + 1, due_at
    FROM x
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: retry_now
-- A pending or held delivery becomes due now.
WITH u AS (
  UPDATE {deliveries} SET status = 'pending', next_attempt_at = :now, updated_at = :now
   WHERE id = :delivery AND tenant = :tenant AND status IN ('pending', 'held')
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: reset
-- A held delivery starts over: no attempts, no snoozes, due now.
WITH u AS (
  UPDATE {deliveries} SET status = 'pending', attempts = 0, snoozes = 0,
         next_attempt_at = :now, updated_at = :now
   WHERE id = :delivery AND tenant = :tenant AND status = 'held'
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: status_of
-- Whether the tenant has this delivery (in either table), to tell NotFound from Conflict.
SELECT status FROM {all} d WHERE id = :delivery AND tenant = :tenant

-- name: stats
-- Counts per status over both tables, and the oldest due unfinished delivery.
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (WHERE status = 'sending') AS sending,
       count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status = 'held') AS held,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       (SELECT min(next_attempt_at) FROM {deliveries}
         WHERE status IN ('pending', 'held', 'processing', 'sending')
           AND next_attempt_at <= :now) AS oldest
  FROM {all} x

-- name: queue_stats
-- The same counts over the hot table's unfinished rows only (the history is never read).
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (WHERE status = 'sending') AS sending,
       count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status = 'held') AS held,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       (SELECT min(next_attempt_at) FROM {deliveries}
         WHERE status IN ('pending', 'held', 'processing', 'sending')
           AND next_attempt_at <= :now) AS oldest
  FROM (SELECT status FROM {deliveries}
         WHERE status IN ('pending', 'held', 'processing', 'sending')) x

-- name: tenant_stats
-- One tenant's counts (to one endpoint when :endpoint is not NULL), and its oldest due
-- unfinished delivery.
SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (WHERE status = 'sending') AS sending,
       count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status = 'held') AS held,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       (SELECT min(next_attempt_at) FROM {deliveries}
         WHERE tenant = :tenant::text
           AND (:endpoint::text IS NULL OR (kind = 'webhook' AND target = :endpoint::text))
           AND status IN ('pending', 'held', 'processing', 'sending')
           AND next_attempt_at <= :now::int8) AS oldest
  FROM {all} x
 WHERE tenant = :tenant::text
   AND (:endpoint::text IS NULL OR (kind = 'webhook' AND target = :endpoint::text))
