-- outbox schema, version 9: strict FIFO per endpoint (`Endpoint::fifo`). An endpoint's flag
-- (off for those that exist), and each delivery's barrier key (core's `barrier_key`, fixed at
-- fan-out and at a replay): the ordering key, or ' fifo' (core's FIFO_BARRIER) for every
-- delivery to a FIFO endpoint. The claim's per-key barrier reads `barrier` instead of
-- `ordering_key`; the unfinished rows take their key as their barrier (a finished row gets one
-- when it is replayed).
ALTER TABLE outbox_endpoints
    ADD COLUMN fifo INTEGER NOT NULL DEFAULT 0 CHECK (fifo IN (0, 1));
ALTER TABLE outbox_deliveries ADD COLUMN barrier TEXT;
UPDATE outbox_deliveries SET barrier = ordering_key
 WHERE ordering_key IS NOT NULL AND status NOT IN ('succeeded', 'dead');
DROP INDEX outbox_deliveries_barrier;
CREATE INDEX outbox_deliveries_barrier
    ON outbox_deliveries (tenant, kind, target, barrier, seq)
    WHERE barrier IS NOT NULL AND status NOT IN ('succeeded', 'dead');
