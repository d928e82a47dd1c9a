-- outbox schema, version 10: rate-limit permits shared by every relay on the database (issue
-- 39). One row per tenant and endpoint holds the grants of the last second as runs (`at_ms`,
-- the grant time in ms of the callers' clock, and `counts`, the permits granted then; at most
-- one run per millisecond, so at most 1,000 entries whatever the rate). `take_permits`
-- (sql/permits.sql) rewrites the row in one `INSERT … ON CONFLICT DO UPDATE`, which locks it,
-- so concurrent relays take turns. `granted` is what the row's last call granted.
CREATE TABLE {schema}.endpoint_permits (
    tenant      text COLLATE "C" NOT NULL,
    endpoint_id uuid NOT NULL,
    at_ms       bigint[] NOT NULL,
    counts      integer[] NOT NULL,
    granted     integer NOT NULL,
    PRIMARY KEY (tenant, endpoint_id)
);
