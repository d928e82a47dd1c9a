-- The operator's changes and counts (`OperatorStore`, bound by `deliveries.rs`; the endpoint
-- changes in `endpoints.rs` run `release_held` and `hold_for_endpoint` in their transactions).
-- A change that may make work due returns `n` (rows changed) and NOTIFYs `:channel` when n > 0.

-- name: release_held
-- An endpoint's held deliveries become due at the later of now and their message's
-- available_at: a delayed message published while the endpoint was paused keeps its time.
WITH u AS (
  UPDATE {queue} x SET state = 0, due_at = greatest(:now, m.available_at), updated_at = :now
    FROM {groups} g, {messages} m
   WHERE g.id = x.group_id AND x.state = 1 AND g.target = :endpoint AND g.kind = 'webhook'
     AND g.tenant = :tenant AND m.id = x.message_id
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: hold_for_endpoint
-- An endpoint's waiting deliveries are held until :until (a paused or disabled endpoint).
UPDATE {queue} x SET state = 1, due_at = :until, updated_at = :now
  FROM {groups} g
 WHERE g.id = x.group_id AND x.state IN (0, 1) AND g.target = :endpoint
   AND g.kind = 'webhook' AND g.tenant = :tenant

-- name: replay
-- A dead delivery moves from the history back to the queue, in its first place in enqueue
-- order (same `seq`), with a fresh run; its folded final attempt goes to `attempts`. Its
-- key_hash is the barrier key's with the endpoint's flag at the replay (enqueue.sql).
WITH x AS (
  DELETE FROM {history} WHERE id = :delivery AND tenant = :tenant AND status = 5
  RETURNING *),
a AS (
  INSERT INTO {attempts} (delivery_id, number, tenant, probe, started_at, finished_at,
                          outcome, status_code, excerpt, run, scheduled_at, detail)
  SELECT id, ledger_len, tenant, a_probe, a_started, last_at, last_outcome, last_status_code,
         last_excerpt, run, a_scheduled, a_detail
    FROM x WHERE a_started IS NOT NULL),
u AS (
  INSERT INTO {queue} (id, seq, message_id, due_at, updated_at, group_id, attempts, snoozes,
                       ledger_len, run, state, key_hash)
  SELECT x.id, x.seq, x.message_id, :now, :now, x.group_id, 0, 0, x.ledger_len, x.run + 1, 0,
         hashtextextended(CASE WHEN e.fifo THEN ' fifo' ELSE m.ordering_key END, 0)
    FROM x JOIN {messages} m ON m.id = x.message_id
    JOIN {groups} g ON g.id = x.group_id
    LEFT JOIN {endpoints} e ON g.kind = 'webhook' AND e.tenant = g.tenant
                           AND e.id::text = g.target
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: retry_now
-- A pending or held delivery becomes due now.
WITH u AS (
  UPDATE {queue} x SET state = 0, due_at = :now, updated_at = :now
    FROM {groups} g
   WHERE x.id = :delivery AND g.id = x.group_id AND g.tenant = :tenant AND x.state IN (0, 1)
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: reset
-- A held delivery starts over: no attempts, no snoozes, due now.
WITH u AS (
  UPDATE {queue} x SET state = 0, attempts = 0, snoozes = 0, due_at = :now, updated_at = :now
    FROM {groups} g
   WHERE x.id = :delivery AND g.id = x.group_id AND g.tenant = :tenant AND x.state = 1
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: cancel
-- A waiting delivery (pending, held) is cancelled: it leaves the queue for the history as
-- dead (`cancelled`), its attempts and ledger kept, as a claim-time kill writes it (its
-- next_attempt_at NULL: read as completed_at, as a completion's dead row is). Being
-- finished, it no longer holds back its ordering key, so the change NOTIFYs.
WITH k AS (
  DELETE FROM {queue} x USING {groups} g
   WHERE x.id = :delivery AND g.id = x.group_id AND g.tenant = :tenant AND x.state IN (0, 1)
  RETURNING x.id, x.seq, x.message_id, x.group_id, g.tenant, x.attempts, x.snoozes,
            x.ledger_len, x.run),
ins AS (
  INSERT INTO {history} (id, seq, message_id, group_id, tenant, created_at, completed_at,
                         status, attempts, snoozes, ledger_len, run, dead_reason,
                         next_attempt_at)
  SELECT k.id, k.seq, k.message_id, k.group_id, k.tenant, m.created_at, :now::int8, 5,
         k.attempts, k.snoozes, k.ledger_len, k.run, 'cancelled', NULL
    FROM k JOIN {messages} m ON m.id = k.message_id),
n AS (SELECT count(*) AS n FROM k)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: cancel_message
-- Every waiting delivery of a tenant's message is cancelled as `cancel` does one, in one
-- statement. `total` counts the message's deliveries in both tables as the statement found
-- them (so one claimed meanwhile is skipped, not lost from the report); `found` is 0 for a
-- message the tenant does not have. The queue has no message index: an operator call scans
-- the unfinished rows, the history is found by its listing index.
WITH msg AS (
  SELECT id, created_at FROM {messages} WHERE id = :message AND tenant = :tenant),
k AS (
  DELETE FROM {queue} x USING {groups} g, msg
   WHERE x.message_id = msg.id AND g.id = x.group_id AND g.tenant = :tenant
     AND x.state IN (0, 1)
  RETURNING x.id, x.seq, x.message_id, x.group_id, g.tenant, x.attempts, x.snoozes,
            x.ledger_len, x.run, msg.created_at),
ins AS (
  INSERT INTO {history} (id, seq, message_id, group_id, tenant, created_at, completed_at,
                         status, attempts, snoozes, ledger_len, run, dead_reason,
                         next_attempt_at)
  SELECT k.id, k.seq, k.message_id, k.group_id, k.tenant, k.created_at, :now::int8, 5,
         k.attempts, k.snoozes, k.ledger_len, k.run, 'cancelled', NULL
    FROM k),
n AS (SELECT count(*) AS n FROM k)
SELECT n.n,
       (SELECT count(*) FROM msg) AS found,
       (SELECT count(*) FROM {queue} x JOIN msg ON x.message_id = msg.id)
       + (SELECT count(*) FROM {history} h JOIN msg ON h.tenant = :tenant
                AND h.created_at = msg.created_at AND h.message_id = msg.id) AS total,
       CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified
  FROM n

-- name: status_of
-- Whether the tenant has this delivery (in either table), to tell NotFound from Conflict.
SELECT CASE x.state WHEN 0 THEN 'pending' WHEN 1 THEN 'held' WHEN 2 THEN 'processing'
                    ELSE 'sending' END AS status
  FROM {queue} x JOIN {groups} g ON g.id = x.group_id
 WHERE x.id = :delivery AND g.tenant = :tenant
UNION ALL
SELECT CASE h.status WHEN 4 THEN 'succeeded' ELSE 'dead' END
  FROM {history} h WHERE h.id = :delivery AND h.tenant = :tenant

-- name: stats
-- Counts per status over both tables, and the oldest due unfinished delivery (a claimed
-- row is due again at its lease end: the later of `abs(due_at)` and `lease_until`, since a
-- claim leaves `due_at` where it was; a last attempt's is negated).
SELECT q.pending, q.processing, q.sending, h.succeeded, q.held, h.dead, q.oldest
  FROM (SELECT count(*) FILTER (WHERE state = 0) AS pending,
               count(*) FILTER (WHERE state = 1) AS held,
               count(*) FILTER (WHERE state = 2) AS processing,
               count(*) FILTER (WHERE state = 3) AS sending,
               min(d.due) FILTER (WHERE d.due <= :now) AS oldest
          FROM {queue} x
         CROSS JOIN LATERAL (SELECT CASE WHEN x.state >= 2 THEN greatest(abs(x.due_at), x.lease_until)
                                  ELSE abs(x.due_at) END AS due) d) q,
       (SELECT count(*) FILTER (WHERE status = 4) AS succeeded,
               count(*) FILTER (WHERE status = 5) AS dead
          FROM {history}) h

-- name: queue_stats
-- The same counts over the queue only (the history is never read).
SELECT count(*) FILTER (WHERE state = 0) AS pending,
       count(*) FILTER (WHERE state = 2) AS processing,
       count(*) FILTER (WHERE state = 3) AS sending,
       0::int8 AS succeeded,
       count(*) FILTER (WHERE state = 1) AS held,
       0::int8 AS dead,
       min(d.due) FILTER (WHERE d.due <= :now) AS oldest
  FROM {queue} x
 CROSS JOIN LATERAL (SELECT CASE WHEN x.state >= 2 THEN greatest(abs(x.due_at), x.lease_until)
                                  ELSE abs(x.due_at) END AS due) d

-- name: tenant_stats
-- One tenant's counts (to one endpoint when :endpoint is not NULL), and its oldest due
-- unfinished delivery.
SELECT q.pending, q.processing, q.sending, h.succeeded, q.held, h.dead, q.oldest
  FROM (SELECT count(*) FILTER (WHERE x.state = 0) AS pending,
               count(*) FILTER (WHERE x.state = 1) AS held,
               count(*) FILTER (WHERE x.state = 2) AS processing,
               count(*) FILTER (WHERE x.state = 3) AS sending,
               min(d.due) FILTER (WHERE d.due <= :now::int8) AS oldest
          FROM {groups} g JOIN {queue} x ON x.group_id = g.id
         CROSS JOIN LATERAL (SELECT CASE WHEN x.state >= 2 THEN greatest(abs(x.due_at), x.lease_until)
                                  ELSE abs(x.due_at) END AS due) d
         WHERE g.tenant = :tenant::text
           AND (:endpoint::text IS NULL OR (g.kind = 'webhook' AND g.target = :endpoint::text))) q,
       (SELECT count(*) FILTER (WHERE h.status = 4) AS succeeded,
               count(*) FILTER (WHERE h.status = 5) AS dead
          FROM {history} h JOIN {groups} g ON g.id = h.group_id
         WHERE h.tenant = :tenant::text
           AND (:endpoint::text IS NULL OR (g.kind = 'webhook' AND g.target = :endpoint::text))) h
