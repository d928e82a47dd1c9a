-- outbox schema, version 10: an endpoint's custom headers, sent with every webhook request to
-- it: a JSON list of `{"name", "value"}` and `{"name", "sealed": base64}` (a value sealed by
-- the vault). Existing endpoints get none.
ALTER TABLE outbox_endpoints ADD COLUMN headers TEXT NOT NULL DEFAULT '[]';
