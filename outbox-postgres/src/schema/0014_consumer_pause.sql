-- A consumer can be paused (`EndpointStore::set_consumer_status`): its deliveries wait,
-- held, until it is resumed. Existing consumers are active.
ALTER TABLE {schema}.consumers ADD COLUMN IF NOT EXISTS status text NOT NULL DEFAULT 'active'
    CHECK (status IN ('active', 'paused'));
