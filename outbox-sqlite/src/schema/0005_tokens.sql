-- outbox schema, version 5: admin API tokens (`outbox tokens`, `outbox serve`). Only the
-- SHA-256 digest of a token's text is stored; a NULL tenant is the all-tenants admin scope.
-- (Version 4 is left to the store's own changes; migrations apply by number, gaps allowed.)
CREATE TABLE outbox_api_tokens (
    id         TEXT NOT NULL PRIMARY KEY,
    label      TEXT NOT NULL,
    tenant     TEXT,
    read_only  INTEGER NOT NULL CHECK (read_only IN (0, 1)),
    hash       BLOB NOT NULL CHECK (length(hash) = 32),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
