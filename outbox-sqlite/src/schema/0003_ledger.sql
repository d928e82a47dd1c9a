-- outbox schema, version 3: the richer ledger, endpoint last status.
-- Added columns only, with defaults that read old rows correctly: a delivery written before
-- this version is in its first run, its old attempts have no scheduled time, its endpoints
-- have no last status until their next completion.

-- The run (1, then one more per replay) and when the current claim's attempt was due.
ALTER TABLE outbox_deliveries ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
ALTER TABLE outbox_deliveries ADD COLUMN due_at INTEGER;

ALTER TABLE outbox_attempts ADD COLUMN run INTEGER NOT NULL DEFAULT 1;
ALTER TABLE outbox_attempts ADD COLUMN scheduled_at INTEGER;

-- The last attempt of a delivery to the endpoint, written with the completion.
ALTER TABLE outbox_endpoints ADD COLUMN last_outcome TEXT;
ALTER TABLE outbox_endpoints ADD COLUMN last_status_code INTEGER;
ALTER TABLE outbox_endpoints ADD COLUMN last_at INTEGER;
