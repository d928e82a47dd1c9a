-- The ledger's reads (`Ledger`): a tenant's deliveries a page at a time, one delivery, one
-- message. `{all}` is the view `delivery_rows` of migration 7: the queue and the history
-- together, with the columns of version 6.

-- name: list_deliveries
-- One page, newest first; every filter is NULL when not asked for.
SELECT {delivery_cols} FROM {all} d
 WHERE d.tenant = :tenant::text
   AND (:status::text IS NULL OR d.status = :status::text)
   AND (:endpoint::text IS NULL OR (d.kind = 'webhook' AND d.target = :endpoint::text))
   AND (:consumer::text IS NULL OR (d.kind = 'handler' AND d.target = :consumer::text))
   AND (:kind::text IS NULL OR d.kind = :kind::text)
   AND (:topic::text IS NULL OR d.topic = :topic::text)
   AND (:since::int8 IS NULL OR d.created_at >= :since::int8)
   AND (:until::int8 IS NULL OR d.created_at < :until::int8)
   AND (:cursor_at::int8 IS NULL OR (d.created_at, d.id) < (:cursor_at::int8, :cursor_id::uuid))
   AND (:ordering_key::text IS NULL OR d.ordering_key = :ordering_key::text)
   AND (:text::text IS NULL
     OR strpos(lower(d.last_excerpt COLLATE "C"), :text::text COLLATE "C") > 0
     OR EXISTS (SELECT 1 FROM {attempts} x WHERE x.delivery_id = d.id
        AND strpos(lower(x.excerpt COLLATE "C"), :text::text COLLATE "C") > 0))
 ORDER BY d.created_at DESC, d.id DESC
 LIMIT :limit::int8

-- name: get_delivery
SELECT {delivery_cols} FROM {all} d WHERE d.id = :id::uuid AND d.tenant = :tenant::text

-- name: get_message
SELECT {message_cols} FROM {messages} WHERE id = :id::uuid AND tenant = :tenant::text

-- name: attempts
-- A delivery's attempts with its payload's fingerprint (one row of NULL attempt columns when
-- it has none; no row when the tenant has no such delivery): the rows of `attempts`, and the
-- final attempt folded into a history row.
SELECT a.number, a.probe, a.started_at, a.finished_at, a.outcome, a.status_code,
       a.excerpt, a.run, a.scheduled_at, a.detail, x.p_size, x.p_sha256
  FROM (SELECT y.id, octet_length(z.payload)::int8 AS p_size,
               encode(sha256(z.payload), 'hex') AS p_sha256
          FROM (SELECT q.id, q.message_id FROM {queue} q JOIN {groups} g ON g.id = q.group_id
                 WHERE q.id = :delivery::uuid AND g.tenant = :tenant::text
                UNION ALL
                SELECT h.id, h.message_id FROM {history} h
                 WHERE h.id = :delivery::uuid AND h.tenant = :tenant::text) y
          JOIN {messages} z ON z.id = y.message_id) x
  LEFT JOIN (SELECT delivery_id, number, probe, started_at, finished_at, outcome, status_code,
                    excerpt, run, scheduled_at, detail
               FROM {attempts} WHERE delivery_id = :delivery::uuid
             UNION ALL
             SELECT id, ledger_len, a_probe, a_started, last_at, last_outcome,
                    last_status_code, last_excerpt, run, a_scheduled, a_detail
               FROM {history}
              WHERE id = :delivery::uuid AND tenant = :tenant::text
                AND a_started IS NOT NULL) a ON a.delivery_id = x.id
 ORDER BY a.number

-- name: lock_purge_cursor
-- Serialises purgers: each call serves the tenant after the one served last.
SELECT tenant FROM {purge_cursor} WHERE singleton FOR UPDATE

-- name: purge_pick_tenant
-- The first tenant after :last with something to purge, else the first from the start: two
-- halves, each `pick_half` (pasted in by `ledger::Sql::new`).
SELECT coalesce({pick_after}, {pick_wrap}) AS tenant

-- name: pick_half
-- The first tenant after {after} with a finished delivery past its cutoff (a walk of the
-- history's listing index); then, only when some tenant's messages lie between {after} and
-- that one (or none has such a delivery), the first such tenant with a message left without
-- deliveries. So while deliveries remain to purge, a pick costs a few index probes, not a
-- pass over the messages, the queue and the history. The wrapping half runs only when the
-- first found nothing, so its search for messages stops at :last ({upto}).
(SELECT CASE
          WHEN h.t IS NOT NULL
           AND (SELECT min(x.tenant) FROM {messages} x WHERE x.tenant > {after}) >= h.t
          THEN h.t
          ELSE least(h.t,
              (SELECT x.tenant FROM {messages} x
                WHERE x.created_at < coalesce((SELECT o.c FROM unnest(:tenants::text[], :cutoffs::int8[]) AS o(t, c)
                                                WHERE o.t = x.tenant), :default_cutoff::int8)
                  AND x.tenant > {after} {upto}
                  AND (h.t IS NULL OR x.tenant < h.t)
                  AND NOT EXISTS (SELECT 1 FROM {queue} y WHERE y.message_id = x.id)
                  AND NOT EXISTS (SELECT 1 FROM {history} y WHERE y.tenant = x.tenant
                                     AND y.created_at = x.created_at AND y.message_id = x.id)
                ORDER BY x.tenant LIMIT 1))
        END
   FROM (SELECT (SELECT y.tenant FROM {history} y
                  WHERE y.completed_at < coalesce((SELECT o.c FROM unnest(:tenants::text[], :cutoffs::int8[]) AS o(t, c)
                                                    WHERE o.t = y.tenant), :default_cutoff::int8)
                    AND y.tenant > {after}
                  ORDER BY y.tenant LIMIT 1) AS t) h)

-- name: history_parts
-- The history's partitions that can hold rows completed before :before (their lower bound is
-- below it), oldest first: the purge reads and deletes one partition at a time.
SELECT p.part FROM (
  SELECT c.oid::regclass::text AS part,
         (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                       'FROM \(''?(MINVALUE|-?[0-9]+)''?\)'))[1] AS lower
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE i.inhparent = (:history::text)::regclass) p
 WHERE p.lower = 'MINVALUE' OR p.lower::int8 < :before::int8
 ORDER BY CASE WHEN p.lower = 'MINVALUE' THEN NULL ELSE p.lower::int8 END NULLS FIRST

-- name: purge_partition
-- Up to :limit of the tenant's finished deliveries completed before :before in one partition
-- of the history, `{part}`, with their attempts (any of them: every one is past the cutoff).
-- The rows are locked where they are found and deleted by their address (a TID scan of this
-- partition alone, no join with the history); returns each one's message and its creation.
WITH v AS (
  SELECT ctid FROM {part}
   WHERE tenant = :tenant::text AND completed_at < :before::int8
   LIMIT :limit::int8
   FOR UPDATE SKIP LOCKED),
dd AS (DELETE FROM {part} x WHERE x.ctid = ANY(ARRAY(SELECT ctid FROM v))
        RETURNING x.id, x.message_id, x.created_at),
da AS (DELETE FROM {attempts} a WHERE a.delivery_id = ANY(ARRAY(SELECT id FROM dd)))
SELECT message_id, created_at FROM dd

-- name: purge_messages_of
-- Of the messages :ids (those whose deliveries the purge just removed; created at the
-- instants :created), the tenant's created before :before that have no delivery left. Set
-- operations, not joins, so no plan can loop over the queue: the ids, less every message
-- with a row in the queue (no index on message_id: one pass over it), less every message with
-- a history row at one of those instants (one index probe per instant; `OFFSET 0` keeps the
-- probe inside the loop). The purge transaction plans it without sequential scans.
WITH cand AS (
  SELECT unnest(:ids::uuid[]) AS id
  EXCEPT
  SELECT q.message_id FROM {queue} q
  EXCEPT
  SELECT h.message_id
    FROM (SELECT DISTINCT c FROM unnest(:created::int8[]) AS i(c)) i
    CROSS JOIN LATERAL (SELECT y.message_id FROM {history} y
                         WHERE y.tenant = :tenant::text AND y.created_at = i.c OFFSET 0) h),
dm AS (DELETE FROM {messages} x USING cand
        WHERE x.id = cand.id AND x.tenant = :tenant::text AND x.created_at < :before::int8
        RETURNING 1)
SELECT count(*) AS n FROM dm

-- name: purge_messages
-- Up to :limit of the tenant's other messages created before :before with no delivery left
-- (those that never had one, or lost it outside a purge). Run only once the tenant has no
-- finished delivery left to purge (a call that purged fewer than its limit), with sequential
-- scans allowed again: it reads the tenant's messages against the whole queue and history.
WITH v AS (
  SELECT x.id FROM {messages} x
   WHERE x.tenant = :tenant::text AND x.created_at < :before::int8
     AND NOT EXISTS (SELECT 1 FROM {queue} y WHERE y.message_id = x.id)
     AND NOT EXISTS (SELECT 1 FROM {history} y WHERE y.tenant = x.tenant
                        AND y.created_at = x.created_at AND y.message_id = x.id)
   ORDER BY x.created_at, x.id LIMIT :limit::int8
   FOR UPDATE SKIP LOCKED),
dm AS (DELETE FROM {messages} x USING v WHERE x.id = v.id RETURNING 1)
SELECT count(*) AS n FROM dm

-- name: set_purge_cursor
UPDATE {purge_cursor} SET tenant = :tenant::text WHERE singleton

-- name: tenants
-- Every tenant with deliveries or messages, by name, with its counts.
WITH d AS (
  SELECT g.tenant, x.state AS status,
         CASE WHEN x.state >= 2 THEN greatest(abs(x.due_at), x.lease_until) ELSE abs(x.due_at) END AS due
    FROM {queue} x JOIN {groups} g ON g.id = x.group_id
  UNION ALL
  SELECT h.tenant, h.status, NULL::int8 FROM {history} h)
SELECT t.tenant, c.*, coalesce(m.n, 0) AS messages
  FROM (SELECT tenant FROM d UNION SELECT tenant FROM {messages}) t
  LEFT JOIN (SELECT tenant AS c_tenant,
                    count(*) FILTER (WHERE status = 0) AS pending,
                    count(*) FILTER (WHERE status = 2) AS processing,
                    count(*) FILTER (WHERE status = 3) AS sending,
                    count(*) FILTER (WHERE status = 4) AS succeeded,
                    count(*) FILTER (WHERE status = 1) AS held,
                    count(*) FILTER (WHERE status = 5) AS dead,
                    min(due) FILTER (WHERE status < 4 AND due <= :now::int8) AS oldest
               FROM d GROUP BY tenant) c ON c.c_tenant = t.tenant
  LEFT JOIN (SELECT tenant AS m_tenant, count(*) AS n FROM {messages}
              GROUP BY tenant) m ON m.m_tenant = t.tenant
 ORDER BY t.tenant

-- name: old_partitions
-- The history's partitions that end at or before :cutoff, oldest first, except the newest
-- partition (the store's day partitions continue from it).
SELECT p.part FROM (
  SELECT c.oid::regclass::text AS part,
         (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(-?[0-9]+)''?\)'))[1]::int8
           AS upper
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
   WHERE i.inhparent = (:history::text)::regclass) p
 WHERE p.upper <= :cutoff::int8
   AND p.upper < (SELECT max((regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                           'TO \(''?(-?[0-9]+)''?\)'))[1]::int8)
                    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = (:history::text)::regclass)
 ORDER BY p.upper
