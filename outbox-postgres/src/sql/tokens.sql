-- The API tokens of the admin API (`TokenStore`), in the `api_tokens` table of migrations 5 and 8.

-- name: create_token
INSERT INTO {api_tokens} (id, label, tenant, read_only, enqueue_only, hash, created_at, revoked_at)
VALUES (:id, :label, :tenant, :read_only, :enqueue_only, :hash, :created_at, :revoked_at)

-- name: get_token
SELECT id, label, tenant, read_only, enqueue_only, hash, created_at, revoked_at
  FROM {api_tokens} WHERE id = :id

-- name: list_tokens
SELECT id, label, tenant, read_only, enqueue_only, hash, created_at, revoked_at
  FROM {api_tokens} ORDER BY created_at, id

-- name: revoke_token
UPDATE {api_tokens} SET revoked_at = coalesce(revoked_at, :at) WHERE id = :id
RETURNING id, label, tenant, read_only, enqueue_only, hash, created_at, revoked_at
