-- outbox schema, version 6: finished deliveries leave the hot table (issue 15). The
-- `deliveries` table holds only unfinished work (pending, held, processing, sending): the
-- claim, completion and release touch it and its indexes, which therefore never fill with
-- finished rows. A completion (or the claim's max-attempts kill) that finishes a delivery
-- deletes it from `deliveries` and appends it, in the same statement, to
-- `deliveries_done`, the append-only history with the same columns. A replay of a dead
-- delivery moves it back. Reads (listings, a delivery, attempts, stats, tenants) cover both
-- tables; retention deletes from the history only.
--
-- Same columns in the same order as `deliveries` (so a row moves by `SELECT *`), with the
-- same defaults and checks (the store's moves name every value).
CREATE TABLE {schema}.deliveries_done
    (LIKE {schema}.deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS);

ALTER TABLE {schema}.deliveries_done ADD PRIMARY KEY (id);

-- Existing finished rows move in the migration's transaction (writes wait for it).
WITH moved AS (
    DELETE FROM {schema}.deliveries WHERE status IN ('succeeded', 'dead') RETURNING *)
INSERT INTO {schema}.deliveries_done SELECT * FROM moved;

-- Listings (newest first) and a message's deliveries (retention), as on the hot table.
CREATE INDEX deliveries_done_listing
    ON {schema}.deliveries_done (tenant, created_at DESC, id DESC);

-- Retention: finished rows by completion, in purge order.
CREATE INDEX deliveries_done_finished
    ON {schema}.deliveries_done (tenant, completed_at, seq);

-- The hot table needs no retention index any more.
DROP INDEX {schema}.deliveries_finished;

-- Each table holds only its own kind of row.
ALTER TABLE {schema}.deliveries ADD CONSTRAINT deliveries_unfinished_check
    CHECK (status IN ('pending', 'held', 'processing', 'sending'));
ALTER TABLE {schema}.deliveries_done ADD CONSTRAINT deliveries_done_finished_check
    CHECK (status IN ('succeeded', 'dead'));

ANALYZE {schema}.deliveries;
ANALYZE {schema}.deliveries_done;
