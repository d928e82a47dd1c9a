-- outbox schema, version 16: the console's records (issue 38). The audit log, newest first
-- per tenant and over all; console sessions by the SHA-256 of their cookie, bounded per
-- token. Activity reads the attempts already kept (the `attempts` table and the final
-- attempt folded into `history`): no new column and no index on the hot path. New tables
-- only: it depends on no other migration's content.
CREATE TABLE IF NOT EXISTS {schema}.audit (
    id      uuid   NOT NULL PRIMARY KEY,
    at      bigint NOT NULL,
    tenant  text   COLLATE "C",
    actor   text   NOT NULL,
    action  text   NOT NULL,
    target  text   NOT NULL,
    detail  text   NOT NULL,
    source  text
);
CREATE INDEX IF NOT EXISTS audit_at ON {schema}.audit (at DESC, id DESC);
CREATE INDEX IF NOT EXISTS audit_tenant ON {schema}.audit (tenant, at DESC, id DESC);

CREATE TABLE IF NOT EXISTS {schema}.console_sessions (
    id_hash    bytea   NOT NULL PRIMARY KEY,
    token      uuid    NOT NULL,
    tenant     text    COLLATE "C",
    read_only  boolean NOT NULL,
    csrf       text    NOT NULL,
    created_at bigint  NOT NULL,
    expires_at bigint  NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_token
    ON {schema}.console_sessions (token, created_at);
CREATE INDEX IF NOT EXISTS console_sessions_expiry
    ON {schema}.console_sessions (expires_at);
