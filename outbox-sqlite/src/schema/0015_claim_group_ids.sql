-- outbox schema, version 15 (issue 34): fewer b-trees written per enqueue, fewer
-- instructions per delivered message. In place and lossless: every delivery and attempt row
-- is copied with its values (seq included); messages gain two columns; endpoints, consumers
-- and tokens are not touched.
--
-- 1. Claim groups by integer id, the shape of PostgreSQL's `groups` (its schema 7). A group
--    is (tenant, kind, target): a tenant's consumer, endpoint or e-mail recipient. Each gets
--    a small integer id, once and for good (rows are never deleted or changed, ids never
--    reused), and every delivery carries its group's id in `grp`. The claim and barrier
--    indexes are keyed by `grp` instead of the three text columns: a lease moves the row's
--    claim-index entry and a settle removes it, and each comparison of the text key cost
--    about 285 instructions (12.7k per delivered message). The delivery keeps its tenant,
--    kind and target columns (listings and filters read them).
-- 2. No message index on deliveries: every enqueue wrote an entry in it (one more b-tree,
--    about one WAL frame per enqueue). A message's deliveries are written one after another
--    in its enqueue's transaction, so their `seq`s are consecutive: the message keeps the
--    range (`first_seq`, `last_seq`; NULL without deliveries) and its deliveries are a rowid
--    range, each still checked by `message_id`. The delivery table is rebuilt without the
--    foreign key to its message (with it, deleting a message would scan every delivery for
--    children); the store deletes a message only once no delivery of it is left.

CREATE TABLE outbox_groups (
    id     INTEGER PRIMARY KEY,
    tenant TEXT    NOT NULL,
    kind   TEXT    NOT NULL,
    target TEXT    NOT NULL,
    UNIQUE (tenant, kind, target)
);

INSERT INTO outbox_groups (tenant, kind, target)
SELECT DISTINCT tenant, kind, target FROM outbox_deliveries ORDER BY 1, 2, 3;

ALTER TABLE outbox_messages ADD COLUMN first_seq INTEGER;
ALTER TABLE outbox_messages ADD COLUMN last_seq INTEGER;

UPDATE outbox_messages
   SET (first_seq, last_seq) = (SELECT min(d.seq), max(d.seq) FROM outbox_deliveries AS d
                                 WHERE d.message_id = outbox_messages.id)
 WHERE EXISTS (SELECT 1 FROM outbox_deliveries AS d WHERE d.message_id = outbox_messages.id);

CREATE TABLE outbox_deliveries_v15 (
    seq              INTEGER PRIMARY KEY,
    id               TEXT    NOT NULL UNIQUE,
    message_id       TEXT    NOT NULL,
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
    due_at           INTEGER,
    barrier          TEXT,
    grp              INTEGER NOT NULL    -- outbox_groups.id
);

INSERT INTO outbox_deliveries_v15
    (seq, id, message_id, tenant, topic, ordering_key, kind, target, status, attempts,
     snoozes, next_attempt_at, lease_until, claim_token, claimed_from, last_outcome,
     last_status_code, last_excerpt, last_at, dead_reason, created_at, updated_at,
     completed_at, attempt_count, run, due_at, barrier, grp)
SELECT d.seq, d.id, d.message_id, d.tenant, d.topic, d.ordering_key, d.kind, d.target,
       d.status, d.attempts, d.snoozes, d.next_attempt_at, d.lease_until, d.claim_token,
       d.claimed_from, d.last_outcome, d.last_status_code, d.last_excerpt, d.last_at,
       d.dead_reason, d.created_at, d.updated_at, d.completed_at, d.attempt_count, d.run,
       d.due_at, d.barrier, g.id
  FROM outbox_deliveries AS d
  JOIN outbox_groups AS g ON g.tenant = d.tenant AND g.kind = d.kind AND g.target = d.target
 ORDER BY d.seq;

-- The attempts move with their deliveries (their foreign key names the new table, and
-- follows it through the rename below).
CREATE TABLE outbox_attempts_v15 (
    delivery_seq INTEGER NOT NULL REFERENCES outbox_deliveries_v15 (seq),
    number       INTEGER NOT NULL,
    probe        INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER NOT NULL,
    outcome      TEXT    NOT NULL,
    status_code  INTEGER,
    excerpt      TEXT,
    run          INTEGER NOT NULL DEFAULT 1,
    scheduled_at INTEGER,
    detail       TEXT,
    PRIMARY KEY (delivery_seq, number)
) WITHOUT ROWID;

INSERT INTO outbox_attempts_v15
    (delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt, run,
     scheduled_at, detail)
SELECT delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt,
       run, scheduled_at, detail
  FROM outbox_attempts;

DROP TABLE outbox_attempts;
DROP TABLE outbox_deliveries;
ALTER TABLE outbox_deliveries_v15 RENAME TO outbox_deliveries;
ALTER TABLE outbox_attempts_v15 RENAME TO outbox_attempts;

-- The indexes of version 14 less the message index; the claim and barrier indexes keyed by
-- the group id.
CREATE INDEX outbox_deliveries_claim
    ON outbox_deliveries (grp, next_attempt_at, seq)
    WHERE status NOT IN ('succeeded', 'dead');
CREATE INDEX outbox_deliveries_exhausted
    ON outbox_deliveries (attempts)
    WHERE attempts > 0 AND status <> 'held' AND status NOT IN ('succeeded', 'dead');
CREATE INDEX outbox_deliveries_barrier
    ON outbox_deliveries (grp, barrier, seq)
    WHERE barrier IS NOT NULL AND status NOT IN ('succeeded', 'dead');
CREATE INDEX outbox_deliveries_finished
    ON outbox_deliveries (tenant, completed_at, seq)
    WHERE status IN ('succeeded', 'dead');
