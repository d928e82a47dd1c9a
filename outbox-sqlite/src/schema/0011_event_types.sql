-- outbox schema, version 11: the event-type catalogue (`EventTypeStore`): topics registered
-- with a description and an optional JSON Schema (its JSON text), and the one row holding the
-- mode every enqueue path enforces. Global, like the consumers.
CREATE TABLE outbox_event_types (
    topic TEXT NOT NULL PRIMARY KEY,
    description TEXT NOT NULL,
    json_schema TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE outbox_catalogue (
    one INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    mode TEXT NOT NULL CHECK (mode IN ('off', 'refuse-unknown', 'validate'))
);
INSERT INTO outbox_catalogue (one, mode) VALUES (1, 'off');
