-- Rate-limit permits (`DeliveryStore::take_permits`), in the `endpoint_permits` table of
-- migration 10: the rule of core's `PermitLog::take` in one statement. Grants at least a
-- second old (`at_ms + 1000 <= :now`) are forgotten; up to `:want` of what the rest leaves
-- free under `:rate` are granted and recorded at `:now` (or at the newest recorded time when
-- another relay's clock ran ahead); the row comes back so the caller reads `granted` and
-- computes when the next permit frees. The conflicting row is locked for the update, so two
-- relays never both see the same free permits.

-- name: take_permits
INSERT INTO {endpoint_permits} AS p (tenant, endpoint_id, at_ms, counts, granted)
VALUES (:tenant, :endpoint,
        CASE WHEN least(:want, :rate) > 0 THEN ARRAY[:now] ELSE '{}'::bigint[] END,
        CASE WHEN least(:want, :rate) > 0 THEN ARRAY[least(:want, :rate)::integer]
             ELSE '{}'::integer[] END,
        least(:want, :rate)::integer)
ON CONFLICT (tenant, endpoint_id) DO UPDATE SET (at_ms, counts, granted) = (
    WITH live AS (
        SELECT u.t, u.c FROM unnest(p.at_ms, p.counts) AS u(t, c) WHERE u.t + 1000 > :now
    ), g AS (
        SELECT least(:want, greatest(:rate - coalesce((SELECT sum(c) FROM live), 0), 0))::integer
                   AS n,
               greatest(:now, coalesce((SELECT max(t) FROM live), :now)) AS at
    ), runs AS (
        SELECT l.t, l.c FROM live l, g WHERE g.n = 0 OR l.t <> g.at
        UNION ALL
        SELECT g.at, g.n + coalesce((SELECT l.c FROM live l WHERE l.t = g.at), 0) FROM g
         WHERE g.n > 0
    )
    SELECT coalesce(array_agg(r.t ORDER BY r.t), '{}'::bigint[]),
           coalesce(array_agg(r.c ORDER BY r.t), '{}'::integer[]),
           (SELECT n FROM g)
      FROM runs r)
RETURNING at_ms, counts, granted
