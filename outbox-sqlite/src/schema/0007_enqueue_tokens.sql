-- outbox schema, version 7: tokens that may only enqueue (`POST /v1/tenants/{tenant}/messages`
-- in `outbox serve`, `outbox tokens create --enqueue-only`). A token is read-only,
-- enqueue-only or neither (full access), never both (checked by the store: SQLite cannot add a
-- table CHECK in place). A library older than this version refuses the file, so none reads
-- an enqueue-only token as a full one.
ALTER TABLE outbox_api_tokens
    ADD COLUMN enqueue_only INTEGER NOT NULL DEFAULT 0 CHECK (enqueue_only IN (0, 1));
