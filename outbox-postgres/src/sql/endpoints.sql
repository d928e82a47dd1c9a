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
SELECT name, filter, created_at FROM {consumers} ORDER BY name

-- name: delete_consumer
DELETE FROM {consumers} WHERE name = :name::text
