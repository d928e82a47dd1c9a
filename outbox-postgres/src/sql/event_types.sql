-- The event-type catalogue (`EventTypeStore`), in the tables of migration 10. Read on an
-- enqueue only when the store's copy is older than its max age, or would refuse.

-- name: put
INSERT INTO {event_types} (topic, description, json_schema, created_at, updated_at)
VALUES (:topic, :description, :json_schema, :now, :now)
ON CONFLICT (topic) DO UPDATE
   SET description = excluded.description, json_schema = excluded.json_schema,
       updated_at = excluded.updated_at
RETURNING topic, description, json_schema, created_at, updated_at

-- name: get
SELECT topic, description, json_schema, created_at, updated_at
  FROM {event_types} WHERE topic = :topic

-- name: list
SELECT topic, description, json_schema, created_at, updated_at
  FROM {event_types} ORDER BY topic COLLATE "C"

-- name: delete
DELETE FROM {event_types} WHERE topic = :topic

-- name: mode
SELECT mode FROM {catalogue}

-- name: set_mode
UPDATE {catalogue} SET mode = :mode
