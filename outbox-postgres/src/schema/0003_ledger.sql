-- outbox schema, version 3: the richer ledger and the endpoint's last status. Added columns
-- only, with defaults that read old rows correctly: a delivery written before this version
-- is in its first run, its old attempts have no scheduled time, and its endpoints have no
-- last status until their next completion.

-- The run (1, then one more per replay) and when the current claim's attempt was due.
ALTER TABLE {schema}.deliveries
    ADD COLUMN run    integer NOT NULL DEFAULT 1,
    ADD COLUMN due_at bigint;

ALTER TABLE {schema}.attempts
    ADD COLUMN run          integer NOT NULL DEFAULT 1,
    ADD COLUMN scheduled_at bigint;

-- The last attempt of a delivery to the endpoint, written by the completion statement.
ALTER TABLE {schema}.endpoints
    ADD COLUMN last_outcome     text,
    ADD COLUMN last_status_code integer,
    ADD COLUMN last_at          bigint;
