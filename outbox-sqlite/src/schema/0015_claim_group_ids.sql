-- outbox schema, version 15: the claim keyed by an integer group (issue 34), the shape of
-- PostgreSQL's `groups` (its schema 7). A group is (tenant, kind, target): a tenant's
-- consumer, endpoint or e-mail recipient. Each gets a small integer id, once and for good
-- (rows are never deleted or changed, ids never reused), and every delivery carries its
-- group's id in `grp`. The claim and barrier indexes are keyed by `grp` instead of the three
-- text columns: a lease moves the row's claim-index entry and a settle removes it, and each
-- comparison of the text key cost about 285 instructions (12.7k per delivered message).
-- The delivery keeps its tenant, kind and target columns (listings and filters read them).
-- In place and lossless: a column added and filled, two indexes rebuilt; no row moves.
CREATE TABLE outbox_groups (
    id     INTEGER PRIMARY KEY,
    tenant TEXT    NOT NULL,
    kind   TEXT    NOT NULL,
    target TEXT    NOT NULL,
    UNIQUE (tenant, kind, target)
);

INSERT INTO outbox_groups (tenant, kind, target)
SELECT DISTINCT tenant, kind, target FROM outbox_deliveries ORDER BY 1, 2, 3;

ALTER TABLE outbox_deliveries ADD COLUMN grp INTEGER NOT NULL DEFAULT 0;

UPDATE outbox_deliveries
   SET grp = (SELECT g.id FROM outbox_groups AS g
               WHERE g.tenant = outbox_deliveries.tenant AND g.kind = outbox_deliveries.kind
                 AND g.target = outbox_deliveries.target);

DROP INDEX outbox_deliveries_claim;
CREATE INDEX outbox_deliveries_claim
    ON outbox_deliveries (grp, next_attempt_at, seq)
    WHERE status NOT IN ('succeeded', 'dead');
DROP INDEX outbox_deliveries_barrier;
CREATE INDEX outbox_deliveries_barrier
    ON outbox_deliveries (grp, barrier, seq)
    WHERE barrier IS NOT NULL AND status NOT IN ('succeeded', 'dead');
