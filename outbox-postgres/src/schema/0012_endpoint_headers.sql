-- outbox schema, version 12: an endpoint's custom headers, sent with every webhook request
-- to it: a JSON list of `{"name", "value"}` and `{"name", "sealed": base64}` (a value sealed
-- by the vault), kept as text so it reads back byte for byte. Existing endpoints get none.
ALTER TABLE {schema}.endpoints ADD COLUMN IF NOT EXISTS headers text NOT NULL DEFAULT '[]';
