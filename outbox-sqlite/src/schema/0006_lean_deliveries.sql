-- outbox schema, version 6: fewer pages written per enqueue, fewer instructions per
-- settled row (issue 34). Every enqueue
-- commit wrote one WAL frame per b-tree it touched: the delivery table was rebuilt to drop
-- two of them.
-- - No AUTOINCREMENT: `seq` stays the rowid, assigned as max + 1 (strictly increasing while
--   the newest row exists, which is all the claim order and the barrier need), so the
--   `sqlite_sequence` page is no longer written by every enqueue.
-- - No ledger index (tenant, created_at, id): listings, newest first, walk the messages'
--   retention index (tenant, created_at) and a message's deliveries through the message
--   index. A delivery's created_at is its message's (the store always wrote them equal);
--   the copy below takes the message's value, so the two orders agree for every row.
-- In place and lossless: every delivery and attempt row is copied with its values (seq
-- included); messages, endpoints, consumers and tokens are not touched.

CREATE TABLE outbox_deliveries_v6 (
    seq              INTEGER PRIMARY KEY,
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
    attempt_count    INTEGER NOT NULL DEFAULT 0,
    run              INTEGER NOT NULL DEFAULT 1,
    due_at           INTEGER
);

INSERT INTO outbox_deliveries_v6
    (seq, id, message_id, tenant, topic, ordering_key, kind, target, status, attempts,
     snoozes, next_attempt_at, lease_until, claim_token, claimed_from, last_outcome,
     last_status_code, last_excerpt, last_at, dead_reason, created_at, updated_at,
     completed_at, attempt_count, run, due_at)
SELECT d.seq, d.id, d.message_id, d.tenant, d.topic, d.ordering_key, d.kind, d.target,
       d.status, d.attempts, d.snoozes, d.next_attempt_at, d.lease_until, d.claim_token,
       d.claimed_from, d.last_outcome, d.last_status_code, d.last_excerpt, d.last_at,
       d.dead_reason, m.created_at, d.updated_at, d.completed_at, d.attempt_count, d.run,
       d.due_at
  FROM outbox_deliveries AS d JOIN outbox_messages AS m ON m.id = d.message_id
 ORDER BY d.seq;

-- The attempts move with their deliveries (their foreign key names the new table, and
-- follows it through the rename below).
CREATE TABLE outbox_attempts_v6 (
    delivery_seq INTEGER NOT NULL REFERENCES outbox_deliveries_v6 (seq),
    number       INTEGER NOT NULL,
    probe        INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER NOT NULL,
    outcome      TEXT    NOT NULL,
    status_code  INTEGER,
    excerpt      TEXT,
    run          INTEGER NOT NULL DEFAULT 1,
    scheduled_at INTEGER,
    PRIMARY KEY (delivery_seq, number)
) WITHOUT ROWID;

INSERT INTO outbox_attempts_v6
    (delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt, run,
     scheduled_at)
SELECT delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt,
       run, scheduled_at
  FROM outbox_attempts;

DROP TABLE outbox_attempts;
DROP TABLE outbox_deliveries;
ALTER TABLE outbox_deliveries_v6 RENAME TO outbox_deliveries;
ALTER TABLE outbox_attempts_v6 RENAME TO outbox_attempts;
DELETE FROM sqlite_sequence WHERE name = 'outbox_deliveries';

-- The indexes of version 4, less the ledger index, their predicates spelt with lists of
-- at most two constants: SQLite builds a list of three or more into an ephemeral table on
-- every run of a statement that tests it, and an UPDATE tests the predicate of every
-- partial index it may move a row in or out of (four ephemeral tables per settled row).
CREATE INDEX outbox_deliveries_claim
    ON outbox_deliveries (tenant, kind, target, next_attempt_at, seq)
    WHERE status NOT IN ('succeeded', 'dead');
CREATE INDEX outbox_deliveries_exhausted
    ON outbox_deliveries (attempts)
    WHERE attempts > 0 AND status <> 'held' AND status NOT IN ('succeeded', 'dead');
CREATE INDEX outbox_deliveries_barrier
    ON outbox_deliveries (tenant, kind, target, ordering_key, seq)
    WHERE ordering_key IS NOT NULL AND status NOT IN ('succeeded', 'dead');
CREATE INDEX outbox_deliveries_finished
    ON outbox_deliveries (tenant, completed_at, seq)
    WHERE status IN ('succeeded', 'dead');
CREATE INDEX outbox_deliveries_message ON outbox_deliveries (message_id);
