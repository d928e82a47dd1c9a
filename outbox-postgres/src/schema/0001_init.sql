-- outbox schema, version 1. `{schema}` is replaced by the configured (validated, quoted)
-- schema name. Times are bigint milliseconds since the Unix epoch from the injected clock;
-- the database's own clock is never read. Names, tenants and keys use the "C" collation so
-- that ordering is byte order, as in every other store.

CREATE TABLE {schema}.messages (
    id              uuid PRIMARY KEY,
    tenant          text COLLATE "C" NOT NULL,
    topic           text COLLATE "C" NOT NULL,
    payload         bytea NOT NULL,
    ordering_key    text COLLATE "C",
    idempotency_key text COLLATE "C",
    available_at    bigint NOT NULL,
    headers         text,            -- JSON object, NULL when empty
    cause           text,            -- JSON, NULL when absent
    created_at      bigint NOT NULL
);

-- Idempotency per (tenant, topic, key); enqueue inserts with ON CONFLICT DO NOTHING so a
-- duplicate never raises inside the caller's transaction.
CREATE UNIQUE INDEX messages_idempotency
    ON {schema}.messages (tenant, topic, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Retention: a tenant's old messages.
CREATE INDEX messages_tenant_created ON {schema}.messages (tenant, created_at);

CREATE TABLE {schema}.deliveries (
    seq              bigserial NOT NULL,  -- enqueue order: ties and the per-key barrier
    id               uuid PRIMARY KEY,
    message_id       uuid NOT NULL,
    tenant           text COLLATE "C" NOT NULL,
    topic            text COLLATE "C" NOT NULL,
    ordering_key     text COLLATE "C",
    kind             text COLLATE "C" NOT NULL,   -- handler | webhook | email
    target           text COLLATE "C" NOT NULL,   -- consumer name | endpoint id | recipient
    status           text COLLATE "C" NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    snoozes          integer NOT NULL DEFAULT 0,
    next_attempt_at  bigint NOT NULL,
    lease_until      bigint,
    claim_token      uuid,
    last_outcome     text,
    last_status_code integer,
    last_excerpt     text,
    last_at          bigint,
    dead_reason      text,
    ledger_len       integer NOT NULL DEFAULT 0,  -- attempts recorded in the ledger
    created_at       bigint NOT NULL,             -- always the message's created_at
    updated_at       bigint NOT NULL,
    completed_at     bigint,
    CONSTRAINT deliveries_status_check CHECK (
        status IN ('pending', 'processing', 'sending', 'succeeded', 'held', 'dead')),
    CONSTRAINT deliveries_kind_check CHECK (kind IN ('handler', 'webhook', 'email'))
);

-- The claim path: only unfinished rows, in claim order.
CREATE INDEX deliveries_due ON {schema}.deliveries (next_attempt_at, seq)
    WHERE status IN ('pending', 'held', 'processing', 'sending');

-- Exhausted rows (discarded at claim): only rows that spent attempts and may be claimed.
CREATE INDEX deliveries_spent ON {schema}.deliveries (attempts)
    WHERE attempts > 0 AND status IN ('pending', 'processing', 'sending');

-- The per-key ordering barrier.
CREATE INDEX deliveries_order ON {schema}.deliveries (tenant, kind, target, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status IN ('pending', 'held', 'processing', 'sending');

-- Ledger listings, newest first. A delivery's tenant and created_at are its message's, so
-- this index also finds a message's deliveries (retention: messages left without any)
-- without an index of its own on message_id, which every row update would have to maintain.
CREATE INDEX deliveries_listing ON {schema}.deliveries (tenant, created_at DESC, id DESC);

-- Retention: finished rows by completion.
CREATE INDEX deliveries_finished ON {schema}.deliveries (tenant, completed_at)
    WHERE status IN ('succeeded', 'dead');

-- Held rows of an endpoint (release on a secret or URL change).
CREATE INDEX deliveries_held ON {schema}.deliveries (target) WHERE status = 'held';

CREATE TABLE {schema}.attempts (
    delivery_id uuid NOT NULL,
    number      integer NOT NULL,
    tenant      text COLLATE "C" NOT NULL,
    probe       boolean NOT NULL,
    started_at  bigint NOT NULL,
    finished_at bigint NOT NULL,
    outcome     text NOT NULL,
    status_code integer,
    excerpt     text,
    PRIMARY KEY (delivery_id, number)
);

CREATE TABLE {schema}.endpoints (
    id              uuid PRIMARY KEY,
    tenant          text COLLATE "C" NOT NULL,
    url             text NOT NULL,
    description     text NOT NULL,
    filter          text[] COLLATE "C" NOT NULL,  -- patterns: `*`, `a.b`, `a.*`
    status          text NOT NULL,
    disabled_reason text,
    secret          bytea NOT NULL,
    previous_secret bytea,
    body_format     text NOT NULL,
    rate_limit      integer,
    created_at      bigint NOT NULL,
    updated_at      bigint NOT NULL
);

CREATE INDEX endpoints_tenant ON {schema}.endpoints (tenant, created_at, id);

CREATE TABLE {schema}.consumers (
    name       text COLLATE "C" PRIMARY KEY,
    filter     text[] COLLATE "C" NOT NULL,
    created_at bigint NOT NULL
);

-- Retention's tenant rotation: the tenant served last.
CREATE TABLE {schema}.purge_cursor (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    tenant    text COLLATE "C" NOT NULL DEFAULT ''
);

INSERT INTO {schema}.purge_cursor (singleton, tenant) VALUES (true, '');

-- Statistics for the small tables read by every enqueue, so the planner's estimates (and
-- JIT decisions) start from "few rows" instead of the default for never-analysed tables.
ANALYZE {schema}.consumers;
ANALYZE {schema}.endpoints;
