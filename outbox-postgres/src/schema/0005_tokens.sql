-- outbox schema, version 5: admin API tokens (`outbox tokens`, `outbox serve`). Only the
-- SHA-256 digest of a token's text is stored; a NULL tenant is the all-tenants admin scope.
-- (Version 4 is left to the store's own changes; migrations apply by number, gaps allowed.)
CREATE TABLE {schema}.api_tokens (
    id         uuid PRIMARY KEY,
    label      text NOT NULL,
    tenant     text,
    read_only  boolean NOT NULL,
    hash       bytea NOT NULL CHECK (octet_length(hash) = 32),
    created_at bigint NOT NULL,
    revoked_at bigint
);
