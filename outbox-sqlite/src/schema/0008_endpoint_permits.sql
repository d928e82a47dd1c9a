-- outbox schema, version 8: rate-limit permits shared by every relay on the file. One row per
-- tenant and endpoint holds the grants of the last second (`PermitLog` runs, 12 bytes each:
-- at most one per millisecond); `take_permits` reads and rewrites it under BEGIN IMMEDIATE.
-- A call that finds every grant expired and grants none deletes the row.
CREATE TABLE outbox_endpoint_permits (
    tenant      TEXT    NOT NULL,
    endpoint_id TEXT    NOT NULL,
    grants      BLOB    NOT NULL,
    PRIMARY KEY (tenant, endpoint_id)
) WITHOUT ROWID;
