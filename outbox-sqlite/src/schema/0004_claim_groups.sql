-- outbox schema, version 4: the claim path on integer keys and per-group claim order.
-- In place and lossless: indexes are replaced, the attempts table is copied row for row
-- onto the deliveries' integer keys; no delivery or message row changes.

-- One claim index per (tenant, kind, target) group, unfinished rows only (finished rows
-- leave it when they finish): a claim walks the groups that have unfinished work and reads
-- the due head of each, so a long backlog in one group is never scanned. It also serves
-- an endpoint's held deliveries, so the separate `held` index goes.
CREATE INDEX outbox_deliveries_claim
    ON outbox_deliveries (tenant, kind, target, next_attempt_at, seq)
    WHERE status IN ('pending', 'held', 'processing', 'sending');
DROP INDEX outbox_deliveries_due;
DROP INDEX outbox_deliveries_held;

-- Attempts keyed by the delivery's integer sequence instead of its 36-byte text id.
CREATE TABLE outbox_attempts_v4 (
    delivery_seq INTEGER NOT NULL REFERENCES outbox_deliveries (seq),
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

INSERT INTO outbox_attempts_v4
    (delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt, run,
     scheduled_at)
SELECT d.seq, a.number, a.probe, a.started_at, a.finished_at, a.outcome, a.status_code,
       a.excerpt, a.run, a.scheduled_at
  FROM outbox_attempts AS a JOIN outbox_deliveries AS d ON d.id = a.delivery_id;

DROP TABLE outbox_attempts;
ALTER TABLE outbox_attempts_v4 RENAME TO outbox_attempts;
