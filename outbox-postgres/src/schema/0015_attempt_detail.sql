-- outbox schema, version 15: the attempt in full (issue 38). What a webhook or HTTP mail
-- attempt sent and got back, as `AttemptDetail::to_json()` (the body as base64), beside the
-- attempt: in `attempts`, and in the history row that folds a delivery's final attempt in
-- (`a_detail`, set with `a_started`). NULL for handler and broker attempts and for every
-- attempt written before this version. `text`, not `jsonb`: the store writes and reads the
-- JSON whole and never queries inside it, so it keeps the exact bytes written with no parse
-- on insert (jsonb would parse, reorder keys and refuse a `\u0000`); a large value is
-- compressed and TOASTed either way. The hot queue gains no column, and no index is added.
-- Nullable without a default: both are catalogue-only changes (no table rewrite); on the
-- partitioned history the column reaches every partition, and partitions made later by
-- `history_ensure` (LIKE the parent) have it.
ALTER TABLE {schema}.attempts ADD COLUMN IF NOT EXISTS detail text;
ALTER TABLE {schema}.history ADD COLUMN IF NOT EXISTS a_detail text;
