-- outbox schema, version 1. Times are INTEGER milliseconds since the Unix epoch (the
-- injected clock's), ids are lowercase hyphenated UUID text. Every table is prefixed
-- `outbox_` so the schema can live in the application's own database file.

CREATE TABLE outbox_messages (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    topic           TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    ordering_key    TEXT,
    idempotency_key TEXT,
    available_at    INTEGER NOT NULL,
    headers         TEXT,            -- JSON object, NULL when there are none
    cause           TEXT,            -- JSON, NULL for an original message
    created_at      INTEGER NOT NULL
);

-- Idempotency is unique per (tenant, topic, key).
CREATE UNIQUE INDEX outbox_messages_idempotency
    ON outbox_messages (tenant, topic, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Retention: a tenant's old messages.
CREATE INDEX outbox_messages_retention ON outbox_messages (tenant, created_at);

CREATE TABLE outbox_deliveries (
    -- The store-assigned, strictly increasing enqueue order (ties and the ordering barrier).
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT    NOT NULL UNIQUE,
    message_id       TEXT    NOT NULL REFERENCES outbox_messages (id),
    tenant           TEXT    NOT NULL,
    topic            TEXT    NOT NULL,
    ordering_key     TEXT,
    kind             TEXT    NOT NULL,   -- handler | webhook | email
    target           TEXT    NOT NULL,   -- consumer name | endpoint id | recipient
    status           TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    snoozes          INTEGER NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    lease_until      INTEGER,
    claim_token      TEXT,
    claimed_from     TEXT,
    last_outcome     TEXT,
    last_status_code INTEGER,
    last_excerpt     TEXT,
    last_at          INTEGER,
    dead_reason      TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    -- Attempts recorded in the ledger (the next one is number attempt_count + 1).
    attempt_count    INTEGER NOT NULL DEFAULT 0
);

-- The claim path sees only unfinished rows, in claim order.
CREATE INDEX outbox_deliveries_due
    ON outbox_deliveries (next_attempt_at, seq)
    WHERE status IN ('pending', 'held', 'processing', 'sending');

-- Claim-time discard: unfinished, non-held rows that have spent attempts, by attempts
-- (almost always empty above the smallest budget; fresh rows are not in it).
CREATE INDEX outbox_deliveries_exhausted
    ON outbox_deliveries (attempts)
    WHERE attempts > 0 AND status IN ('pending', 'processing', 'sending');

-- The per-key ordering barrier.
CREATE INDEX outbox_deliveries_barrier
    ON outbox_deliveries (tenant, kind, target, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status NOT IN ('succeeded', 'dead');

-- Ledger listings, newest first per tenant.
CREATE INDEX outbox_deliveries_ledger ON outbox_deliveries (tenant, created_at, id);

-- Retention of finished deliveries, per tenant, oldest completion first.
CREATE INDEX outbox_deliveries_finished
    ON outbox_deliveries (tenant, completed_at, seq)
    WHERE status IN ('succeeded', 'dead');

-- Held deliveries of an endpoint (release on secret or URL change).
CREATE INDEX outbox_deliveries_held ON outbox_deliveries (target) WHERE status = 'held';

-- Messages left without deliveries; the foreign key check.
CREATE INDEX outbox_deliveries_message ON outbox_deliveries (message_id);

CREATE TABLE outbox_attempts (
    delivery_id TEXT    NOT NULL REFERENCES outbox_deliveries (id),
    number      INTEGER NOT NULL,
    probe       INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,
    status_code INTEGER,
    excerpt     TEXT,
    PRIMARY KEY (delivery_id, number)
) WITHOUT ROWID;

CREATE TABLE outbox_endpoints (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    description     TEXT    NOT NULL,
    filter          TEXT    NOT NULL,   -- `*` or `a.b,c.*`
    status          TEXT    NOT NULL,   -- active | paused | disabled
    disabled_reason TEXT,
    secret          BLOB    NOT NULL,   -- sealed by a SecretVault
    previous_secret BLOB,
    body_format     TEXT    NOT NULL,
    rate_limit      INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX outbox_endpoints_tenant ON outbox_endpoints (tenant, created_at, id);

CREATE TABLE outbox_consumers (
    name       TEXT    NOT NULL PRIMARY KEY,
    filter     TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

-- Retention's tenant rotation: the tenant the last purge served.
CREATE TABLE outbox_purge_cursor (
    id     INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    tenant TEXT    NOT NULL
);
