-- outbox schema, version 14: the console's records (issue 38). The audit log, newest first
-- per tenant and over all; console sessions by the SHA-256 of their cookie, bounded per
-- token. Activity reads the attempts already kept: no new column, no index on the hot path.
-- New tables only: it depends on no other migration's content.
CREATE TABLE IF NOT EXISTS outbox_audit (
    id      TEXT    NOT NULL PRIMARY KEY,
    at      INTEGER NOT NULL,
    tenant  TEXT,
    actor   TEXT    NOT NULL,
    action  TEXT    NOT NULL,
    target  TEXT    NOT NULL,
    detail  TEXT    NOT NULL,
    source  TEXT
);
CREATE INDEX IF NOT EXISTS outbox_audit_at ON outbox_audit (at, id);
CREATE INDEX IF NOT EXISTS outbox_audit_tenant ON outbox_audit (tenant, at, id);

CREATE TABLE IF NOT EXISTS outbox_console_sessions (
    id_hash    BLOB    NOT NULL PRIMARY KEY,
    token      TEXT    NOT NULL,
    tenant     TEXT,
    read_only  INTEGER NOT NULL,
    csrf       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS outbox_console_sessions_token
    ON outbox_console_sessions (token, created_at);
CREATE INDEX IF NOT EXISTS outbox_console_sessions_expiry
    ON outbox_console_sessions (expires_at);
