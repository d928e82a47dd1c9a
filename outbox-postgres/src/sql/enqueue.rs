//! The enqueue's statement texts: one message, and a batch (bound by `enqueue.rs`).

use crate::rows::MESSAGE_COLS;
use crate::schema::Tables;
use outboxkit_core::endpoint::DISABLED_HOLD;
use outboxkit_core::Timestamp;

/// The enqueue statements of one store.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) one: String,
    pub(crate) many: String,
    pub(crate) find_idempotent: String,
}

impl Sql {
    pub fn new(t: &Tables) -> Self {
        Sql {
            one: one_text(t),
            many: many_text(t),
            find_idempotent: format!(
                "SELECT id FROM {m} WHERE tenant = $1::text AND topic = $2::text \
                    AND idempotency_key = $3::text",
                m = t.messages
            ),
        }
    }
}

/// Whether `topic` matches any pattern of the `patterns` array: `*`, the exact topic, or
/// `prefix.*` for any deeper topic (the semantics of `TopicPattern::matches`).
pub(crate) fn topic_matches(patterns: &str, topic: &str) -> String {
    format!(
        "('*' = ANY({patterns}) OR {topic} = ANY({patterns}) OR EXISTS (\
            SELECT 1 FROM unnest({patterns}) AS fp(p) \
            WHERE right(fp.p, 2) = '.*' AND length({topic}) > length(fp.p) - 1 \
              AND starts_with({topic}, left(fp.p, -1))))"
    )
}

/// A delivery id derived from a random UUIDv7 base (`hi` = its first 8 bytes, `lo` = the
/// last 8 as a bigint) and the delivery's 1-based position `n` in its message's fan-out:
/// the low bits are XORed with `n`, keeping the version, variant and timestamp.
pub(crate) fn derive_id(hi: &str, lo: &str, n: &str) -> String {
    format!("encode({hi} || int8send({lo} # {n}), 'hex')::uuid")
}

/// Until when a new delivery to the endpoint aliased `e` waits, written at `now`
/// (`EndpointStatus::hold_until`): NULL when active, `Timestamp::MAX` when paused, `now +
/// DISABLED_HOLD` when disabled.
pub(crate) fn endpoint_hold(e: &str, now: &str) -> String {
    format!(
        "(CASE {e}.status WHEN 'paused' THEN {never}::int8 \
                          WHEN 'disabled' THEN {now} + {hold}::int8 END)",
        never = Timestamp::MAX.as_unix_millis(),
        hold = DISABLED_HOLD.as_millis(),
    )
}

/// The statement of one message. Parameters, bound in this order by [`PostgresStore::write_one`]:
/// $1 id, $2 tenant, $3 topic, $4 payload, $5 ordering key, $6 idempotency key,
/// $7 available at, $8 headers, $9 cause, $10 now, $11/$12 delivery id base (hi, lo),
/// $13 e-mail recipients, $14 NOTIFY channel (NULL: none).
pub(crate) fn one_text(t: &Tables) -> String {
    let (m, d, e, c) = (&t.messages, &t.deliveries, &t.endpoints, &t.consumers);
    format!(
        "WITH ins AS ( \
           INSERT INTO {m} ({MESSAGE_COLS}) \
           VALUES ($1::uuid, $2::text, $3::text, $4::bytea, $5::text, $6::text, $7::int8, \
                   $8::text, $9::text, $10::int8) \
           ON CONFLICT DO NOTHING RETURNING id), \
         dest AS ( \
           SELECT 0 AS grp, 0::int8 AS k1, c.name AS k2, 'handler' AS kind, c.name AS target, \
                  NULL::int8 AS hold \
             FROM {c} c WHERE {cm} \
           UNION ALL \
           SELECT 1, e.created_at, e.id::text, 'webhook', e.id::text, {hold} \
             FROM {e} e WHERE e.tenant = $2::text AND {em} \
           UNION ALL \
           SELECT 2, r.ord, '', 'email', r.rcpt, NULL::int8 \
             FROM unnest($13::text[]) WITH ORDINALITY AS r(rcpt, ord)), \
         nd AS ( \
           INSERT INTO {d} (id, message_id, tenant, topic, ordering_key, kind, target, status, \
                            next_attempt_at, created_at, updated_at) \
           SELECT {did}, ins.id, $2::text, $3::text, $5::text, dest.kind, dest.target, \
                  CASE WHEN dest.hold IS NULL THEN 'pending' ELSE 'held' END, \
                  coalesce(dest.hold, $7::int8), $10::int8, $10::int8 \
             FROM ins CROSS JOIN dest \
            ORDER BY dest.grp, dest.k1, dest.k2 \
           RETURNING 1), \
         n AS (SELECT count(*) AS n FROM nd) \
         SELECT (SELECT id FROM ins) AS inserted, n.n AS deliveries, \
                CASE WHEN NOT EXISTS (SELECT 1 FROM ins) THEN \
                  (SELECT x.id FROM {m} x WHERE x.tenant = $2::text AND x.topic = $3::text \
                      AND x.idempotency_key = $6::text) END AS existing, \
                CASE WHEN n.n > 0 AND $14::text IS NOT NULL \
                  THEN pg_notify($14::text, '')::text END AS notified \
           FROM n",
        cm = topic_matches("c.filter", "$3::text"),
        em = topic_matches("e.filter", "$3::text"),
        hold = endpoint_hold("e", "$10::int8"),
        did = derive_id(
            "$11::bytea",
            "$12::int8",
            "row_number() OVER (ORDER BY dest.grp, dest.k1, dest.k2)"
        ),
    )
}

/// The statement of a batch: `unnest` arrays, constant text whatever the batch size.
/// Parameters, bound in this order by [`PostgresStore::write_batch`]: $1 ids, $2 tenants,
/// $3 topics, $4 payloads, $5 ordering keys, $6 idempotency keys, $7 available at,
/// $8 headers, $9 causes, $10/$11 delivery id bases (hi, lo), $12 e-mail message numbers
/// (1-based), $13 e-mail recipients, $14 now, $15 NOTIFY channel (NULL: none),
/// $16/$17 the distinct (tenant, topic) routes.
pub(crate) fn many_text(t: &Tables) -> String {
    let (m, d, e, c) = (&t.messages, &t.deliveries, &t.endpoints, &t.consumers);
    format!(
        "WITH input AS ( \
           SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], \
                                $6::text[], $7::int8[], $8::text[], $9::text[], $10::bytea[], \
                                $11::int8[]) \
             WITH ORDINALITY AS i(id, tenant, topic, payload, ordering_key, idempotency_key, \
                                  available_at, headers, cause, did_hi, did_lo, ord)), \
         ins AS ( \
           INSERT INTO {m} ({MESSAGE_COLS}) \
           SELECT id, tenant, topic, payload, ordering_key, idempotency_key, available_at, \
                  headers, cause, $14::int8 \
             FROM input ORDER BY ord \
           ON CONFLICT DO NOTHING RETURNING id), \
         good AS (SELECT input.* FROM input WHERE input.id IN (SELECT id FROM ins)), \
         routes AS ( \
           SELECT t.tenant, t.topic, 0 AS grp, 0::int8 AS k1, c.name AS k2, \
                  'handler' AS kind, c.name AS target, NULL::int8 AS hold \
             FROM unnest($16::text[], $17::text[]) AS t(tenant, topic) \
             JOIN {c} c ON {cm} \
           UNION ALL \
           SELECT t.tenant, t.topic, 1, e.created_at, e.id::text, 'webhook', e.id::text, \
                  {hold} \
             FROM unnest($16::text[], $17::text[]) AS t(tenant, topic) \
             JOIN {e} e ON e.tenant = t.tenant AND {em}), \
         dest AS ( \
           SELECT g.ord AS mord, r.grp, r.k1, r.k2, r.kind, r.target, r.hold \
             FROM good g JOIN routes r ON r.tenant = g.tenant AND r.topic = g.topic \
           UNION ALL \
           SELECT g.ord, 2, r.ord, '', 'email', r.rcpt, NULL::int8 \
             FROM unnest($12::int8[], $13::text[]) WITH ORDINALITY AS r(mord, rcpt, ord) \
             JOIN good g ON g.ord = r.mord), \
         nd AS ( \
           INSERT INTO {d} (id, message_id, tenant, topic, ordering_key, kind, target, status, \
                            next_attempt_at, created_at, updated_at) \
           SELECT {did}, g.id, g.tenant, g.topic, g.ordering_key, dest.kind, dest.target, \
                  CASE WHEN dest.hold IS NULL THEN 'pending' ELSE 'held' END, \
                  coalesce(dest.hold, g.available_at), $14::int8, $14::int8 \
             FROM dest JOIN good g ON g.ord = dest.mord \
            ORDER BY dest.mord, dest.grp, dest.k1, dest.k2 \
           RETURNING message_id), \
         counts AS (SELECT message_id, count(*) AS n FROM nd GROUP BY message_id), \
         total AS (SELECT coalesce(sum(n), 0) AS n FROM counts) \
         SELECT i.ord, ins.id IS NOT NULL AS inserted, coalesce(k.n, 0) AS deliveries, \
                ex.id AS existing, \
                CASE WHEN i.ord = 1 AND total.n > 0 AND $15::text IS NOT NULL \
                  THEN pg_notify($15::text, '')::text END \
                  AS notified \
           FROM input i \
           LEFT JOIN ins ON ins.id = i.id \
           LEFT JOIN counts k ON k.message_id = i.id \
           LEFT JOIN LATERAL ( \
                SELECT x.id FROM {m} x \
                 WHERE ins.id IS NULL AND x.tenant = i.tenant AND x.topic = i.topic \
                   AND x.idempotency_key = i.idempotency_key) ex ON true \
           CROSS JOIN total \
          ORDER BY i.ord",
        cm = topic_matches("c.filter", "t.topic"),
        em = topic_matches("e.filter", "t.topic"),
        hold = endpoint_hold("e", "$14::int8"),
        did = derive_id(
            "g.did_hi",
            "g.did_lo",
            "row_number() OVER (PARTITION BY dest.mord \
                                ORDER BY dest.grp, dest.k1, dest.k2)"
        ),
    )
}
