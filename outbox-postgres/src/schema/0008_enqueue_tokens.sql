-- outbox schema, version 8: tokens that may only enqueue (`POST /v1/tenants/{tenant}/messages`
-- in `outbox serve`, `outbox tokens create --enqueue-only`). A token is read-only,
-- enqueue-only or neither (full access), never both. A binary older than this version refuses
-- the schema, so none reads an enqueue-only token as a full one.
ALTER TABLE {schema}.api_tokens
    ADD COLUMN enqueue_only boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT api_tokens_one_access CHECK (NOT (read_only AND enqueue_only));
