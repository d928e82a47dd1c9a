-- outbox schema, version 4: fair claiming. The claim fills its batch in rounds over the
-- (tenant, destination) groups that have due work, reading each group's due deliveries in
-- order from this index (and finding the groups by a skip scan over its leading columns),
-- so a backlog in one group costs a claim no more than any other group. It replaces the
-- due-time index of the strictly-by-due-time claim; the count of unfinished rows in it is
-- the same. Built inside the migration's transaction: writes to the deliveries table wait
-- until it is built.
CREATE INDEX deliveries_group
    ON {schema}.deliveries (tenant, kind, target, next_attempt_at, seq)
    WHERE status IN ('pending', 'held', 'processing', 'sending');

DROP INDEX {schema}.deliveries_due;
