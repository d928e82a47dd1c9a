-- The enqueue (`MessageStore`, bound by `enqueue.rs`): a message and its fan-out in one
-- statement. Destinations, in fan-out order: the consumers whose filter matches the topic (by
-- name), the tenant's endpoints whose filter matches (by creation), then the e-mail
-- recipients (in the order given). A filter matches with `*`, the exact topic, or `prefix.*`
-- for any deeper topic (core's `TopicPattern::matches`). A delivery to a paused consumer or
-- endpoint is held until {never} (for ever), to a disabled endpoint for {disabled_hold} ms
-- (`EndpointStatus::hold_until`). Delivery ids derive from a random UUIDv7 base (8 high bytes
-- and 8 low bytes as a bigint), the low bits XORed with the delivery's 1-based position in its
-- message's fan-out, keeping version, variant and timestamp. NOTIFY goes to :channel when it
-- is not NULL and the enqueue wrote a delivery.

-- Each delivery is one narrow `queue` row in its (tenant, channel, target) group, the group
-- made on first use (`known`/`newg`: a group another transaction made meanwhile is found by the
-- conflict). key_hash: `hashtextextended` of the barrier key (core's `barrier_key`): ' fifo'
-- (core's FIFO_BARRIER) for a delivery to a strict-FIFO endpoint, else the ordering key; NULL
-- when there is none.

-- name: one
WITH ins AS (
  INSERT INTO {messages} ({message_cols})
  VALUES (:id::uuid, :tenant::text, :topic::text, :payload::bytea, :ordering_key::text,
          :idempotency_key::text, :available_at::int8, :headers::text, :cause::text,
          :now::int8)
  ON CONFLICT DO NOTHING RETURNING id),
dest AS (
  SELECT 0 AS grp, 0::int8 AS k1, c.name AS k2, 'handler' AS kind, c.name AS target,
         (CASE c.status WHEN 'paused' THEN {never}::int8 END) AS hold, false AS fifo
    FROM {consumers} c
   WHERE ('*' = ANY(c.filter) OR :topic::text = ANY(c.filter) OR EXISTS (
           SELECT 1 FROM unnest(c.filter) AS fp(p)
            WHERE right(fp.p, 2) = '.*' AND length(:topic::text) > length(fp.p) - 1
              AND starts_with(:topic::text, left(fp.p, -1))))
  UNION ALL
  SELECT 1, e.created_at, e.id::text, 'webhook', e.id::text,
         (CASE e.status WHEN 'paused' THEN {never}::int8
                        WHEN 'disabled' THEN :now::int8 + {disabled_hold}::int8 END), e.fifo
    FROM {endpoints} e
   WHERE e.tenant = :tenant::text
     AND ('*' = ANY(e.filter) OR :topic::text = ANY(e.filter) OR EXISTS (
           SELECT 1 FROM unnest(e.filter) AS fp(p)
            WHERE right(fp.p, 2) = '.*' AND length(:topic::text) > length(fp.p) - 1
              AND starts_with(:topic::text, left(fp.p, -1))))
  UNION ALL
  SELECT 2, r.ord, '', 'email', r.rcpt, NULL::int8, false
    FROM unnest(:recipients::text[]) WITH ORDINALITY AS r(rcpt, ord)),
known AS (
  SELECT dest.*, gr.id AS gid FROM dest
    LEFT JOIN {groups} gr
      ON gr.tenant = :tenant::text AND gr.kind = dest.kind AND gr.target = dest.target),
newg AS (
  INSERT INTO {groups} (tenant, kind, target)
  SELECT :tenant::text, k.kind, k.target FROM known k
   WHERE k.gid IS NULL AND EXISTS (SELECT 1 FROM ins)
  ON CONFLICT (tenant, kind, target) DO UPDATE SET kind = EXCLUDED.kind
  RETURNING id, kind, target),
nd AS (
  INSERT INTO {queue} (id, message_id, group_id, state, due_at, key_hash, updated_at)
  SELECT encode(:did_hi::bytea || int8send(:did_lo::int8 #
                  row_number() OVER (ORDER BY k.grp, k.k1, k.k2)), 'hex')::uuid,
         ins.id, coalesce(k.gid, ng.id), CASE WHEN k.hold IS NULL THEN 0 ELSE 1 END,
         coalesce(k.hold, :available_at::int8),
         hashtextextended(CASE WHEN k.fifo THEN ' fifo' ELSE :ordering_key::text END, 0),
         :now::int8
    FROM ins CROSS JOIN known k
    LEFT JOIN newg ng ON ng.kind = k.kind AND ng.target = k.target
   ORDER BY k.grp, k.k1, k.k2
  RETURNING 1),
n AS (SELECT count(*) AS n FROM nd)
SELECT (SELECT id FROM ins) AS inserted, n.n AS deliveries,
       CASE WHEN NOT EXISTS (SELECT 1 FROM ins) THEN
         (SELECT x.id FROM {messages} x WHERE x.tenant = :tenant::text
             AND x.topic = :topic::text AND x.idempotency_key = :idempotency_key::text) END
         AS existing,
       CASE WHEN n.n > 0 AND :channel::text IS NOT NULL
         THEN pg_notify(:channel::text, '')::text END AS notified
  FROM n

-- name: many
-- A batch as `unnest` arrays (one text whatever the batch size). :email_messages are the
-- 1-based numbers of the messages each of :recipients belongs to; :route_tenants/:route_topics
-- the distinct (tenant, topic) pairs of the batch, matched once each.
WITH input AS (
  SELECT * FROM unnest(:ids::uuid[], :tenants::text[], :topics::text[], :payloads::bytea[],
                       :ordering_keys::text[], :idempotency_keys::text[],
                       :available_at::int8[], :headers::text[], :causes::text[],
                       :did_hi::bytea[], :did_lo::int8[])
    WITH ORDINALITY AS i(id, tenant, topic, payload, ordering_key, idempotency_key,
                         available_at, headers, cause, did_hi, did_lo, ord)),
ins AS (
  INSERT INTO {messages} ({message_cols})
  SELECT id, tenant, topic, payload, ordering_key, idempotency_key, available_at,
         headers, cause, :now::int8
    FROM input ORDER BY ord
  ON CONFLICT DO NOTHING RETURNING id),
good AS (SELECT input.* FROM input WHERE input.id IN (SELECT id FROM ins)),
routes AS (
{batch_routes}),
dest AS (
  SELECT g.ord AS mord, r.grp, r.k1, r.k2, r.kind, r.target, r.hold, r.fifo, g.id, g.tenant,
         g.ordering_key, g.available_at, g.did_hi, g.did_lo
    FROM good g JOIN routes r ON r.tenant = g.tenant AND r.topic = g.topic
  UNION ALL
  SELECT g.ord, 2, r.ord, '', 'email', r.rcpt, NULL::int8, false, g.id, g.tenant,
         g.ordering_key, g.available_at, g.did_hi, g.did_lo
    FROM unnest(:email_messages::int8[], :recipients::text[])
         WITH ORDINALITY AS r(mord, rcpt, ord)
    JOIN good g ON g.ord = r.mord),
-- The message's columns travel with each destination: joining `dest` back to `good` by
-- number was planned as a nested loop over both CTEs (1,000 × 1,000 rows, 97 of a call's
-- 119 ms in EXPLAIN ANALYZE) whenever the estimates of the CTEs came out small.
{batch_groups},
nd AS (
  INSERT INTO {queue} (id, message_id, group_id, state, due_at, key_hash, updated_at)
  SELECT encode(k.did_hi || int8send(k.did_lo #
                  row_number() OVER (PARTITION BY k.mord ORDER BY k.grp, k.k1, k.k2)),
                'hex')::uuid,
         k.id, coalesce(k.gid, ng.id), CASE WHEN k.hold IS NULL THEN 0 ELSE 1 END,
         coalesce(k.hold, k.available_at),
         hashtextextended(CASE WHEN k.fifo THEN ' fifo' ELSE k.ordering_key END, 0), :now::int8
    FROM known k
    LEFT JOIN newg ng ON ng.tenant = k.tenant AND ng.kind = k.kind AND ng.target = k.target
   ORDER BY k.mord, k.grp, k.k1, k.k2
  RETURNING message_id),
counts AS (SELECT message_id, count(*) AS n FROM nd GROUP BY message_id),
total AS (SELECT coalesce(sum(n), 0) AS n FROM counts)
SELECT i.ord, ins.id IS NOT NULL AS inserted, coalesce(k.n, 0) AS deliveries,
       ex.id AS existing,
       CASE WHEN i.ord = 1 AND total.n > 0 AND :channel::text IS NOT NULL
         THEN pg_notify(:channel::text, '')::text END AS notified
  FROM input i
  LEFT JOIN ins ON ins.id = i.id
  LEFT JOIN counts k ON k.message_id = i.id
  LEFT JOIN LATERAL (
       SELECT x.id FROM {messages} x
        WHERE ins.id IS NULL AND x.tenant = i.tenant AND x.topic = i.topic
          AND x.idempotency_key = i.idempotency_key) ex ON true
  CROSS JOIN total
 ORDER BY i.ord

-- name: find_idempotent
SELECT id FROM {messages}
 WHERE tenant = :tenant::text AND topic = :topic::text AND idempotency_key = :idempotency_key::text

-- name: routes
-- The destinations of a batch written with COPY (`enqueue.rs`, `write_copied`): for each
-- distinct (tenant, topic) of :route_tenants/:route_topics its consumers and endpoints, matched
-- as in `many`, and for each distinct (tenant, recipient) of :email_tenants/:email_targets its
-- e-mail group; each with its group id, the group made on first use as in `many`. Then one row
-- per ordering key of :keys with its key_hash in k1 (grp 3). Unordered: the caller puts a
-- route's destinations in fan-out order (grp, k1, target byte-wise), as `many` numbers them.
WITH dest AS (
{batch_routes}
  UNION ALL
  SELECT r.tenant, NULL, 2, 0, '', 'email', r.rcpt, NULL::int8, false
    FROM unnest(:email_tenants::text[], :email_targets::text[]) AS r(tenant, rcpt)),
{batch_groups}
SELECT k.tenant, k.topic, k.grp, k.k1, k.target, k.hold, k.fifo, coalesce(k.gid, ng.id) AS gid
  FROM known k
  LEFT JOIN newg ng ON ng.tenant = k.tenant AND ng.kind = k.kind AND ng.target = k.target
UNION ALL
SELECT NULL, NULL, 3, hashtextextended(x.k, 0), x.k, NULL, false, NULL
  FROM unnest(:keys::text[]) AS x(k)

-- name: copy_messages
-- The columns in the order `enqueue.rs` writes them (`rows::MESSAGE_COLS`).
COPY {messages} ({message_cols}) FROM STDIN (FORMAT binary)

-- name: copy_queue
COPY {queue} (id, message_id, group_id, state, due_at, key_hash, updated_at)
  FROM STDIN (FORMAT binary)

-- name: notify
SELECT pg_notify(:channel::text, '')

-- name: batch_routes
-- The consumers and endpoints each distinct (tenant, topic) of :route_tenants/:route_topics
-- reaches, with the fan-out order (grp, k1, k2), the hold and the FIFO flag: pasted into
-- `many` and `routes` (`sql/enqueue.rs`) before they are parsed.
  SELECT t.tenant, t.topic, 0 AS grp, 0::int8 AS k1, c.name AS k2,
         'handler' AS kind, c.name AS target,
         (CASE c.status WHEN 'paused' THEN {never}::int8 END) AS hold, false AS fifo
    FROM unnest(:route_tenants::text[], :route_topics::text[]) AS t(tenant, topic)
    JOIN {consumers} c
      ON ('*' = ANY(c.filter) OR t.topic = ANY(c.filter) OR EXISTS (
           SELECT 1 FROM unnest(c.filter) AS fp(p)
            WHERE right(fp.p, 2) = '.*' AND length(t.topic) > length(fp.p) - 1
              AND starts_with(t.topic, left(fp.p, -1))))
  UNION ALL
  SELECT t.tenant, t.topic, 1, e.created_at, e.id::text, 'webhook', e.id::text,
         (CASE e.status WHEN 'paused' THEN {never}::int8
                        WHEN 'disabled' THEN :now::int8 + {disabled_hold}::int8 END), e.fifo
    FROM unnest(:route_tenants::text[], :route_topics::text[]) AS t(tenant, topic)
    JOIN {endpoints} e
      ON e.tenant = t.tenant
     AND ('*' = ANY(e.filter) OR t.topic = ANY(e.filter) OR EXISTS (
           SELECT 1 FROM unnest(e.filter) AS fp(p)
            WHERE right(fp.p, 2) = '.*' AND length(t.topic) > length(fp.p) - 1
              AND starts_with(t.topic, left(fp.p, -1))))

-- name: batch_groups
-- Each destination of `dest` (tenant, kind, target) with its group id (`known.gid`), and the
-- groups made for those that had none (`newg`; a group another transaction made meanwhile is
-- found by the conflict): pasted into `many` and `routes` before they are parsed.
known AS (
  SELECT dest.*, gr.id AS gid
    FROM dest
    LEFT JOIN {groups} gr
      ON gr.tenant = dest.tenant AND gr.kind = dest.kind AND gr.target = dest.target),
newg AS (
  INSERT INTO {groups} (tenant, kind, target)
  SELECT DISTINCT k.tenant, k.kind, k.target FROM known k WHERE k.gid IS NULL
  ON CONFLICT (tenant, kind, target) DO UPDATE SET kind = EXCLUDED.kind
  RETURNING id, tenant, kind, target)
