-- outbox schema, version 13: the event-type catalogue (`EventTypeStore`): topics registered
-- with a description and an optional JSON Schema (its JSON text), and the one row holding the
-- mode every enqueue path enforces (`off`, `refuse-unknown`, `validate`; the SQL enqueue
-- function reads it too). Global, like the consumers: topics are the product's.
CREATE TABLE {schema}.event_types (
    topic text PRIMARY KEY,
    description text NOT NULL,
    json_schema text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
CREATE TABLE {schema}.catalogue (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    mode text NOT NULL CHECK (mode IN ('off', 'refuse-unknown', 'validate'))
);
INSERT INTO {schema}.catalogue (one, mode) VALUES (true, 'off');
