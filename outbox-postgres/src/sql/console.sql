-- The console's records (`ConsoleStore`): the `audit` and `console_sessions` tables of
-- migration 16, and activity from the ledger.

-- name: record_audit
INSERT INTO {audit} (id, at, tenant, actor, action, target, detail, source)
VALUES (:id, :at, :tenant, :actor, :action, :target, :detail, :source)

-- name: list_audit
SELECT id, at, tenant, actor, action, target, detail, source
  FROM {audit}
 WHERE (:tenant::text IS NULL OR tenant = :tenant::text)
   AND (:at::int8 IS NULL OR (at, id) < (:at::int8, :id::uuid))
 ORDER BY at DESC, id DESC
 LIMIT :n

-- name: purge_audit
DELETE FROM {audit} WHERE id IN
  (SELECT id FROM {audit} WHERE at < :before ORDER BY at, id LIMIT :n)

-- name: drop_expired_sessions
DELETE FROM {console_sessions} WHERE expires_at <= :now

-- name: put_session
INSERT INTO {console_sessions} (id_hash, token, tenant, read_only, csrf, created_at, expires_at)
VALUES (:id_hash, :token, :tenant, :read_only, :csrf, :created_at, :expires_at)
ON CONFLICT (id_hash) DO UPDATE SET token = excluded.token, tenant = excluded.tenant,
  read_only = excluded.read_only, csrf = excluded.csrf, created_at = excluded.created_at,
  expires_at = excluded.expires_at

-- name: bound_sessions
-- The token's newest :max sessions stay.
DELETE FROM {console_sessions} WHERE token = :token AND id_hash NOT IN
  (SELECT id_hash FROM {console_sessions} WHERE token = :token
    ORDER BY created_at DESC, id_hash DESC LIMIT :max)

-- name: get_session
SELECT id_hash, token, tenant, read_only, csrf, created_at, expires_at
  FROM {console_sessions} WHERE id_hash = :id_hash AND expires_at > :now

-- name: delete_session
DELETE FROM {console_sessions} WHERE id_hash = :id_hash

-- name: delete_token_sessions
DELETE FROM {console_sessions} WHERE token = :token

-- name: activity
-- Attempts of the tenant (and endpoint) finished in [:since, :until), by bucket: the rows of
-- `attempts` (of unfinished and finished deliveries) and the final attempt folded into a
-- history row. An attempt is dead when it failed and is attempt number ledger_len of a
-- delivery now dead (history status 5).
WITH t AS (
  SELECT a.finished_at AS fin, a.started_at AS st, a.outcome,
         (h.status = 5 AND a.number = h.ledger_len) AS last_dead
    FROM {attempts} a
    LEFT JOIN {history} h ON h.id = a.delivery_id AND h.tenant = :tenant::text
    LEFT JOIN {queue} q ON q.id = a.delivery_id
    JOIN {groups} g ON g.id = coalesce(h.group_id, q.group_id)
   WHERE a.tenant = :tenant::text AND a.finished_at >= :since::int8 AND a.finished_at < :until::int8
     AND (h.id IS NOT NULL OR q.id IS NOT NULL)
     AND (:endpoint::text IS NULL OR (g.kind = 'webhook' AND g.target = :endpoint::text))
  UNION ALL
  SELECT h.last_at, h.a_started, h.last_outcome, h.status = 5
    FROM {history} h JOIN {groups} g ON g.id = h.group_id
   WHERE h.tenant = :tenant::text AND h.a_started IS NOT NULL
     AND h.completed_at >= :since::int8
     AND h.last_at >= :since::int8 AND h.last_at < :until::int8
     AND (:endpoint::text IS NULL OR (g.kind = 'webhook' AND g.target = :endpoint::text))
)
SELECT ((fin - :since::int8) / :bucket::int8)::int8 AS b,
       count(*) FILTER (WHERE outcome = 'succeeded')::int8 AS succeeded,
       count(*) FILTER (WHERE outcome <> 'succeeded' AND NOT last_dead)::int8 AS failed,
       count(*) FILTER (WHERE outcome <> 'succeeded' AND last_dead)::int8 AS dead,
       coalesce(sum(greatest(fin - st, 0)) FILTER (WHERE outcome = 'succeeded'), 0)::int8 AS total,
       coalesce(max(greatest(fin - st, 0)) FILTER (WHERE outcome = 'succeeded'), 0)::int8 AS worst
  FROM t GROUP BY 1
