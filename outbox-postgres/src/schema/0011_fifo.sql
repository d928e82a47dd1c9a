-- Strict FIFO per endpoint (`Endpoint::fifo`): off for every endpoint that exists. The flag is
-- read at fan-out (enqueue.sql), so the queue's rows are unchanged: their key_hash stays the
-- ordering key's.
ALTER TABLE {schema}.endpoints ADD COLUMN fifo boolean NOT NULL DEFAULT false;
