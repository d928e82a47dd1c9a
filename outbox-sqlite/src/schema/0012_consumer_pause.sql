-- outbox schema, version 12: a consumer can be paused (`EndpointStore::set_consumer_status`):
-- its deliveries wait, held, until it is resumed. Existing consumers are active.
ALTER TABLE outbox_consumers
    ADD COLUMN status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused'));
