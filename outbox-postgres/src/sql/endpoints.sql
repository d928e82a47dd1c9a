-- Webhook endpoints (tenant-scoped) and consumers (global): `EndpointStore`.

-- name: insert_endpoint
INSERT INTO {endpoints} (id, tenant, url, description, filter, status, disabled_reason,
                         secret, previous_secret, body_format, rate_limit, fifo, created_at,
                         updated_at, headers)
VALUES (:id::uuid, :tenant::text, :url::text, :description::text, :filter::text[],
        :status::text, :disabled_reason::text, :secret::bytea, :previous_secret::bytea,
        :body_format::text, :rate_limit::int4, :fifo::bool, :created_at::int8,
        :updated_at::int8, :headers::text)

-- name: update_endpoint
UPDATE {endpoints}
   SET url = :url::text, description = :description::text, filter = :filter::text[],
       status = :status::text, disabled_reason = :disabled_reason::text,
       secret = :secret::bytea, previous_secret = :previous_secret::bytea,
       body_format = :body_format::text, rate_limit = :rate_limit::int4, fifo = :fifo::bool,
       updated_at = :updated_at::int8, headers = :headers::text
 WHERE id = :id::uuid AND tenant = :tenant::text

-- name: get_endpoint
SELECT id, tenant, url, description, filter, status, disabled_reason, secret,
       previous_secret, body_format, rate_limit, fifo, created_at, updated_at, last_outcome,
       last_status_code, last_at, headers
  FROM {endpoints} WHERE id = :id::uuid AND tenant = :tenant::text

-- name: lock_endpoint
SELECT id, tenant, url, description, filter, status, disabled_reason, secret,
       previous_secret, body_format, rate_limit, fifo, created_at, updated_at, last_outcome,
       last_status_code, last_at, headers
  FROM {endpoints} WHERE id = :id::uuid AND tenant = :tenant::text
   FOR UPDATE

-- name: list_endpoints
SELECT id, tenant, url, description, filter, status, disabled_reason, secret,
       previous_secret, body_format, rate_limit, fifo, created_at, updated_at, last_outcome,
       last_status_code, last_at, headers
  FROM {endpoints} WHERE tenant = :tenant::text
 ORDER BY created_at, id

-- name: delete_endpoint
DELETE FROM {endpoints} WHERE id = :id::uuid AND tenant = :tenant::text

-- name: put_consumer
INSERT INTO {consumers} (name, filter, created_at)
VALUES (:name::text, :filter::text[], :created_at::int8)
ON CONFLICT (name) DO UPDATE SET filter = EXCLUDED.filter, created_at = EXCLUDED.created_at

-- name: list_consumers
SELECT name, filter, created_at, status FROM {consumers} ORDER BY name

-- name: set_consumer_status
-- Pause or resume a consumer (its deliveries are held or released in the same transaction by
-- `hold_for_consumer` / `release_for_consumer`).
UPDATE {consumers} SET status = :status::text WHERE name = :name::text
RETURNING name, filter, created_at, status

-- name: hold_for_consumer
-- A paused consumer's pending deliveries (of every tenant) are held, due never; those in
-- flight finish as they would.
UPDATE {queue} x SET state = 1, due_at = :until, updated_at = :now
  FROM {groups} g
 WHERE g.id = x.group_id AND x.state = 0 AND g.kind = 'handler' AND g.target = :name::text

-- name: release_for_consumer
-- A resumed consumer's held deliveries become due at the later of now and their message's
-- available_at (a delayed message keeps its time).
WITH u AS (
  UPDATE {queue} x SET state = 0, due_at = greatest(:now, m.available_at), updated_at = :now
    FROM {groups} g, {messages} m
   WHERE g.id = x.group_id AND x.state = 1 AND g.kind = 'handler' AND g.target = :name::text
     AND m.id = x.message_id
  RETURNING 1),
n AS (SELECT count(*) AS n FROM u)
SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify(:channel, '')::text END AS notified FROM n

-- name: delete_consumer
DELETE FROM {consumers} WHERE name = :name::text
