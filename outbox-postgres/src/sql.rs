//! Statement text, built once per store with the schema name substituted, then reused (sqlx
//! prepares and caches each text per connection). Every time is a bound parameter from the
//! injected clock; no statement reads `now()`.

use outboxkit_core::endpoint::DISABLED_HOLD;
use outboxkit_core::Timestamp;

/// The columns of a delivery row, in the order [`crate::rows::delivery`] reads them.
const DELIVERY_COLS: [&str; 21] = [
    "id",
    "message_id",
    "tenant",
    "topic",
    "ordering_key",
    "kind",
    "target",
    "status",
    "attempts",
    "snoozes",
    "next_attempt_at",
    "lease_until",
    "last_outcome",
    "last_status_code",
    "last_excerpt",
    "last_at",
    "dead_reason",
    "created_at",
    "updated_at",
    "completed_at",
    "run",
];

const MESSAGE_COLS: &str = "id, tenant, topic, payload, ordering_key, idempotency_key, \
     available_at, headers, cause, created_at";

const ENDPOINT_COLS: &str = "id, tenant, url, description, filter, status, disabled_reason, \
     secret, previous_secret, body_format, rate_limit, created_at, updated_at";

/// [`ENDPOINT_COLS`] and the endpoint's last delivery (read, never inserted).
const ENDPOINT_READ_COLS: &str = "id, tenant, url, description, filter, status, disabled_reason, \
     secret, previous_secret, body_format, rate_limit, created_at, updated_at, last_outcome, \
     last_status_code, last_at";

const UNFINISHED: &str = "('pending', 'held', 'processing', 'sending')";

fn delivery_cols(alias: &str) -> String {
    DELIVERY_COLS
        .iter()
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `topic` matches any pattern of the `patterns` array: `*`, the exact topic, or
/// `prefix.*` for any deeper topic (the semantics of `TopicPattern::matches`).
fn topic_matches(patterns: &str, topic: &str) -> String {
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
fn derive_id(hi: &str, lo: &str, n: &str) -> String {
    format!("encode({hi} || int8send({lo} # {n}), 'hex')::uuid")
}

/// The claim's attempt budget for the delivery aliased `d` (NULL when not served).
fn budget(d: &str) -> String {
    format!(
        "(CASE {d}.kind \
            WHEN 'handler' THEN ($4::int4[])[array_position($3::text[], {d}.target)] \
            WHEN 'webhook' THEN $5::int4 \
            WHEN 'email' THEN $6::int4 END)"
    )
}

/// Until when a new delivery to the endpoint aliased `e` waits, written at `now`
/// (`EndpointStatus::hold_until`): NULL when active, `Timestamp::MAX` when paused, `now +
/// DISABLED_HOLD` when disabled.
fn endpoint_hold(e: &str, now: &str) -> String {
    format!(
        "(CASE {e}.status WHEN 'paused' THEN {never}::int8 \
                          WHEN 'disabled' THEN {now} + {hold}::int8 END)",
        never = Timestamp::MAX.as_unix_millis(),
        hold = DISABLED_HOLD.as_millis(),
    )
}

/// `WITH u AS (<update returning 1>) SELECT count, notify-if-any`.
fn counted_with_notify(update: &str, channel_param: &str) -> String {
    format!(
        "WITH u AS ({update} RETURNING 1), n AS (SELECT count(*) AS n FROM u) \
         SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify({channel_param}, '')::text END AS notified \
         FROM n"
    )
}

/// Every statement of one store.
#[derive(Debug)]
pub(crate) struct Sql {
    pub schema: String,
    pub enqueue_one: String,
    pub enqueue_many: String,
    pub find_idempotent: String,
    pub claim: String,
    pub complete: String,
    pub release: String,
    pub extend: String,
    pub mark_sending: String,
    pub release_held: String,
    pub replay: String,
    pub retry_now: String,
    pub hold_for_endpoint: String,
    pub reset: String,
    pub status_of: String,
    pub stats: String,
    pub get_delivery: String,
    pub get_message: String,
    pub list_deliveries: String,
    pub attempts: String,
    pub insert_endpoint: String,
    pub get_endpoint: String,
    pub lock_endpoint: String,
    pub list_endpoints: String,
    pub update_endpoint: String,
    pub delete_endpoint: String,
    pub put_consumer: String,
    pub list_consumers: String,
    pub delete_consumer: String,
    pub lock_purge_cursor: String,
    pub purge_pick_tenant: String,
    pub purge_deliveries: String,
    pub purge_messages: String,
    pub set_purge_cursor: String,
}

impl Sql {
    /// The statements for `schema` (already validated as a plain identifier).
    pub fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let m = format!("{s}.messages");
        let d = format!("{s}.deliveries");
        let a = format!("{s}.attempts");
        let e = format!("{s}.endpoints");
        let c = format!("{s}.consumers");
        let p = format!("{s}.purge_cursor");
        let dcols = delivery_cols("d");

        let enqueue_one = format!(
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
               SELECT 1, e.created_at, e.id::text, 'webhook', e.id::text, {hold1} \
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
            hold1 = endpoint_hold("e", "$10::int8"),
            did = derive_id(
                "$11::bytea",
                "$12::int8",
                "row_number() OVER (ORDER BY dest.grp, dest.k1, dest.k2)"
            ),
        );

        let enqueue_many = format!(
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
        );

        let find_idempotent = format!(
            "SELECT id FROM {m} WHERE tenant = $1::text AND topic = $2::text \
                AND idempotency_key = $3::text"
        );

        // $1 now, $2 batch, $3 consumers, $4 their budgets, $5 webhook budget, $6 e-mail
        // budget, $7 excluded topics, $8 dormant topics, $9 tokens, $10 lease end,
        // $11 smallest budget.
        let claim = format!(
            "WITH exhausted AS ( \
               SELECT d.id FROM {d} d \
                WHERE d.attempts > 0 AND d.status IN ('pending', 'processing', 'sending') \
                  AND d.attempts >= $11::int4 AND d.next_attempt_at <= $1::int8 \
                  AND d.topic <> ALL($7::text[]) AND d.attempts >= {bd} \
                ORDER BY d.attempts DESC \
                LIMIT 1000 \
                FOR UPDATE OF d SKIP LOCKED), \
             killed AS ( \
               UPDATE {d} d SET status = 'dead', dead_reason = 'max_attempts', \
                      completed_at = $1::int8, claim_token = NULL, lease_until = NULL, \
                      updated_at = $1::int8 \
                 FROM exhausted x WHERE d.id = x.id \
               RETURNING d.id), \
             picked AS ( \
               SELECT d.id, d.status AS claimed_from, d.next_attempt_at AS due_at, d.seq \
                 FROM {d} d \
                WHERE d.status IN {UNFINISHED} \
                  AND d.next_attempt_at <= $1::int8 \
                  AND d.topic <> ALL($7::text[]) \
                  AND {bd} IS NOT NULL \
                  AND (d.status = 'held' OR d.attempts < {bd}) \
                  AND (d.ordering_key IS NULL OR NOT EXISTS ( \
                        SELECT 1 FROM {d} p \
                         WHERE p.tenant = d.tenant AND p.kind = d.kind AND p.target = d.target \
                           AND p.ordering_key = d.ordering_key AND p.seq < d.seq \
                           AND p.status IN {UNFINISHED} \
                           AND p.topic <> ALL($8::text[]) \
                           AND NOT (p.status <> 'held' AND p.next_attempt_at <= $1::int8 \
                                    AND p.topic <> ALL($7::text[]) AND p.attempts >= {bd}))) \
                ORDER BY d.next_attempt_at, d.seq \
                LIMIT $2::int8 \
                FOR UPDATE OF d SKIP LOCKED), \
             numbered AS ( \
               SELECT picked.*, (row_number() OVER (ORDER BY due_at, seq))::int4 AS rn \
                 FROM picked), \
             claimed AS ( \
               UPDATE {d} d SET status = 'processing', \
                      attempts = d.attempts + CASE WHEN n.claimed_from = 'held' THEN 0 ELSE 1 END, \
                      claim_token = ($9::uuid[])[n.rn], lease_until = $10::int8, \
                      due_at = n.due_at, \
                      next_attempt_at = $10::int8, updated_at = $1::int8 \
                 FROM numbered n WHERE d.id = n.id \
               RETURNING {dcols}, d.claim_token, n.claimed_from, n.rn) \
             SELECT c.*, m.payload AS m_payload, m.idempotency_key AS m_idempotency_key, \
                    m.available_at AS m_available_at, m.headers AS m_headers, \
                    m.cause AS m_cause, m.created_at AS m_created_at \
               FROM claimed c JOIN {m} m ON m.id = c.message_id \
              ORDER BY c.rn",
            bd = budget("d"),
        );

        let complete = format!(
            "WITH u AS ( \
               SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::int4[], $6::int4[], \
                                    $7::int8[], $8::int8[], $9::text[], $10::text[], $11::int4[], \
                                    $12::text[], $13::int8[], $14::bool[], $15::bool[], \
                                    $16::bool[], $17::int8[], $18::int8[], $19::text[], \
                                    $20::int4[], $21::text[], $22::text[], $23::bool[]) \
                 AS u(id, token, status, attempts, snoozes, next_at, completed_at, dead_reason, \
                      lo_outcome, lo_code, lo_excerpt, lo_at, disable, \
                      a_set, a_probe, a_started, a_finished, a_outcome, a_code, a_excerpt, \
                      tenant, awaits)), \
             upd AS ( \
               UPDATE {d} d SET \
                      status = CASE WHEN {back} THEN 'pending' ELSE u.status END, \
                      attempts = u.attempts, snoozes = u.snoozes, \
                      next_attempt_at = CASE WHEN {back} THEN $1::int8 ELSE u.next_at END, \
                      completed_at = u.completed_at, \
                      dead_reason = u.dead_reason, \
                      last_outcome = coalesce(u.lo_outcome, d.last_outcome), \
                      last_status_code = CASE WHEN u.lo_outcome IS NULL \
                                              THEN d.last_status_code ELSE u.lo_code END, \
                      last_excerpt = CASE WHEN u.lo_outcome IS NULL \
                                          THEN d.last_excerpt ELSE u.lo_excerpt END, \
                      last_at = CASE WHEN u.lo_outcome IS NULL THEN d.last_at ELSE u.lo_at END, \
                      claim_token = NULL, lease_until = NULL, updated_at = $1::int8, \
                      ledger_len = d.ledger_len + CASE WHEN u.a_set THEN 1 ELSE 0 END \
                 FROM u \
                WHERE d.id = u.id AND d.claim_token = u.token AND d.tenant = u.tenant \
                  AND d.status IN ('processing', 'sending') \
               RETURNING d.id, d.tenant, d.ledger_len, d.run, d.due_at, \
                         CASE WHEN d.kind = 'webhook' THEN d.target::uuid END AS endpoint_id, \
                         u.disable, u.a_set, u.a_probe, u.a_started, u.a_finished, u.a_outcome, \
                         u.a_code, u.a_excerpt), \
             att AS ( \
               INSERT INTO {a} (delivery_id, number, tenant, probe, started_at, finished_at, \
                                outcome, status_code, excerpt, run, scheduled_at) \
               SELECT id, ledger_len, tenant, a_probe, a_started, a_finished, a_outcome, a_code, \
                      a_excerpt, run, due_at \
                 FROM upd WHERE a_set), \
             ep AS ( \
               SELECT endpoint_id, tenant, bool_or(disable) AS gone, \
                      (array_agg(a_outcome ORDER BY a_finished DESC) FILTER (WHERE a_set))[1] \
                        AS o, \
                      (array_agg(a_code ORDER BY a_finished DESC) FILTER (WHERE a_set))[1] AS c, \
                      max(a_finished) FILTER (WHERE a_set) AS at \
                 FROM upd WHERE endpoint_id IS NOT NULL AND (disable OR a_set) \
                GROUP BY endpoint_id, tenant), \
             dis AS ( \
               UPDATE {e} e SET \
                      status = CASE WHEN ep.gone THEN 'disabled' ELSE e.status END, \
                      disabled_reason = CASE WHEN ep.gone THEN 'gone' ELSE e.disabled_reason END, \
                      updated_at = CASE WHEN ep.gone THEN $1::int8 ELSE e.updated_at END, \
                      last_outcome = CASE WHEN {newer} THEN ep.o ELSE e.last_outcome END, \
                      last_status_code = CASE WHEN {newer} THEN ep.c ELSE e.last_status_code END, \
                      last_at = CASE WHEN {newer} THEN ep.at ELSE e.last_at END \
                 FROM ep WHERE e.id = ep.endpoint_id AND e.tenant = ep.tenant) \
             SELECT id FROM upd",
            newer = "(ep.at IS NOT NULL AND (e.last_at IS NULL OR ep.at >= e.last_at))",
            // A wait for an endpoint that a resume or delete made while the delivery was
            // claimed (`DeliveryUpdate::endpoint_is_back`): pending, due now.
            back = format!(
                "(u.awaits AND NOT EXISTS (SELECT 1 FROM {e} x \
                   WHERE x.id = (CASE WHEN d.kind = 'webhook' THEN d.target END)::uuid \
                     AND x.tenant = d.tenant AND x.status <> 'active'))"
            ),
        );

        let release = format!(
            "UPDATE {d} d SET status = u.status, attempts = u.attempts, \
                    next_attempt_at = u.next_at, claim_token = NULL, lease_until = NULL, \
                    updated_at = $1::int8 \
               FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::int4[], $6::int8[], \
                           $7::text[]) \
                    AS u(id, token, status, attempts, next_at, tenant) \
              WHERE d.id = u.id AND d.claim_token = u.token AND d.tenant = u.tenant \
                AND d.status IN ('processing', 'sending') \
             RETURNING d.id"
        );

        let extend = format!(
            "UPDATE {d} SET lease_until = $3::int8, next_attempt_at = $3::int8, \
                    updated_at = $4::int8 \
              WHERE id = $1::uuid AND claim_token = $2::uuid AND tenant = $5::text \
                AND status IN ('processing', 'sending') \
             RETURNING id"
        );

        let mark_sending = format!(
            "UPDATE {d} SET status = 'sending', updated_at = $3::int8 \
              WHERE id = $1::uuid AND claim_token = $2::uuid AND tenant = $4::text \
                AND status IN ('processing', 'sending') \
             RETURNING id"
        );

        let release_held = counted_with_notify(
            &format!(
                "UPDATE {d} SET status = 'pending', next_attempt_at = $3::int8, \
                        updated_at = $3::int8 \
                  WHERE status = 'held' AND target = $2::text AND kind = 'webhook' \
                    AND tenant = $1::text"
            ),
            "$4::text",
        );

        let replay = counted_with_notify(
            &format!(
                "UPDATE {d} SET status = 'pending', attempts = 0, snoozes = 0, \
                        next_attempt_at = $3::int8, dead_reason = NULL, completed_at = NULL, \
                        claim_token = NULL, lease_until = NULL, updated_at = $3::int8, \
                        run = run + 1 \
                  WHERE id = $1::uuid AND tenant = $2::text AND status = 'dead'"
            ),
            "$4::text",
        );

        let retry_now = counted_with_notify(
            &format!(
                "UPDATE {d} SET status = 'pending', next_attempt_at = $3::int8, \
                        updated_at = $3::int8 \
                  WHERE id = $1::uuid AND tenant = $2::text AND status IN ('pending', 'held')"
            ),
            "$4::text",
        );

        let hold_for_endpoint = format!(
            "UPDATE {d} SET status = 'held', next_attempt_at = $3::int8, updated_at = $4::int8 \
              WHERE status IN ('pending', 'held') AND target = $2::text AND kind = 'webhook' \
                AND tenant = $1::text"
        );

        let reset = counted_with_notify(
            &format!(
                "UPDATE {d} SET status = 'pending', attempts = 0, snoozes = 0, \
                        next_attempt_at = $3::int8, updated_at = $3::int8 \
                  WHERE id = $1::uuid AND tenant = $2::text AND status = 'held'"
            ),
            "$4::text",
        );

        let status_of = format!("SELECT status FROM {d} WHERE id = $1::uuid AND tenant = $2::text");

        let stats = format!(
            "SELECT count(*) FILTER (WHERE status = 'pending') AS pending, \
                    count(*) FILTER (WHERE status = 'processing') AS processing, \
                    count(*) FILTER (WHERE status = 'sending') AS sending, \
                    count(*) FILTER (WHERE status = 'succeeded') AS succeeded, \
                    count(*) FILTER (WHERE status = 'held') AS held, \
                    count(*) FILTER (WHERE status = 'dead') AS dead, \
                    (SELECT min(next_attempt_at) FROM {d} \
                      WHERE status IN {UNFINISHED} AND next_attempt_at <= $1::int8) AS oldest \
               FROM {d}"
        );

        let get_delivery =
            format!("SELECT {dcols} FROM {d} d WHERE d.id = $1::uuid AND d.tenant = $2::text");
        let get_message =
            format!("SELECT {MESSAGE_COLS} FROM {m} WHERE id = $1::uuid AND tenant = $2::text");

        let list_deliveries = format!(
            "SELECT {dcols} FROM {d} d \
              WHERE d.tenant = $1::text \
                AND ($2::text IS NULL OR d.status = $2::text) \
                AND ($3::text IS NULL OR (d.kind = 'webhook' AND d.target = $3::text)) \
                AND ($4::text IS NULL OR (d.kind = 'handler' AND d.target = $4::text)) \
                AND ($5::text IS NULL OR d.kind = $5::text) \
                AND ($6::text IS NULL OR d.topic = $6::text) \
                AND ($7::int8 IS NULL OR d.created_at >= $7::int8) \
                AND ($8::int8 IS NULL OR d.created_at < $8::int8) \
                AND ($9::int8 IS NULL OR (d.created_at, d.id) < ($9::int8, $10::uuid)) \
                AND ($12::text IS NULL OR d.ordering_key = $12::text) \
                AND ($13::text IS NULL \
                  OR strpos(lower(d.last_excerpt COLLATE \"C\"), $13::text COLLATE \"C\") > 0 \
                  OR EXISTS (SELECT 1 FROM {a} x WHERE x.delivery_id = d.id \
                     AND strpos(lower(x.excerpt COLLATE \"C\"), $13::text COLLATE \"C\") > 0)) \
              ORDER BY d.created_at DESC, d.id DESC \
              LIMIT $11::int8"
        );

        let attempts = format!(
            "SELECT a.number, a.probe, a.started_at, a.finished_at, a.outcome, a.status_code, \
                    a.excerpt, a.run, a.scheduled_at, x.p_size, x.p_sha256 \
               FROM (SELECT y.id, octet_length(z.payload)::int8 AS p_size, \
                            encode(sha256(z.payload), 'hex') AS p_sha256 \
                       FROM {d} y JOIN {m} z ON z.id = y.message_id \
                      WHERE y.id = $1::uuid AND y.tenant = $2::text) x \
               LEFT JOIN {a} a ON a.delivery_id = x.id \
              ORDER BY a.number"
        );

        let insert_endpoint = format!(
            "INSERT INTO {e} ({ENDPOINT_COLS}) \
             VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::text[], $6::text, $7::text, \
                     $8::bytea, $9::bytea, $10::text, $11::int4, $12::int8, $13::int8)"
        );
        let get_endpoint = format!(
            "SELECT {ENDPOINT_READ_COLS} FROM {e} WHERE id = $1::uuid AND tenant = $2::text"
        );
        let lock_endpoint = format!("{get_endpoint} FOR UPDATE");
        let list_endpoints = format!(
            "SELECT {ENDPOINT_READ_COLS} FROM {e} WHERE tenant = $1::text ORDER BY created_at, id"
        );
        let update_endpoint = format!(
            "UPDATE {e} SET url = $3::text, description = $4::text, filter = $5::text[], \
                    status = $6::text, disabled_reason = $7::text, secret = $8::bytea, \
                    previous_secret = $9::bytea, body_format = $10::text, \
                    rate_limit = $11::int4, updated_at = $12::int8 \
              WHERE id = $1::uuid AND tenant = $2::text"
        );
        let delete_endpoint = format!("DELETE FROM {e} WHERE id = $1::uuid AND tenant = $2::text");

        let put_consumer = format!(
            "INSERT INTO {c} (name, filter, created_at) VALUES ($1::text, $2::text[], $3::int8) \
             ON CONFLICT (name) DO UPDATE SET filter = EXCLUDED.filter, \
                                              created_at = EXCLUDED.created_at"
        );
        let list_consumers = format!("SELECT name, filter, created_at FROM {c} ORDER BY name");
        let delete_consumer = format!("DELETE FROM {c} WHERE name = $1::text");

        // A message's deliveries share its tenant and created_at: found through the listing
        // index, so no index on message_id is needed.
        let no_delivery = format!(
            "SELECT 1 FROM {d} y WHERE y.tenant = x.tenant AND y.created_at = x.created_at \
                AND y.message_id = x.id"
        );
        let lock_purge_cursor = format!("SELECT tenant FROM {p} WHERE singleton FOR UPDATE");
        // A tenant's cutoff: its entry in the overrides ($3 tenants, $4 cutoffs), else $1.
        let cut = |t: &str| {
            format!(
                "coalesce((SELECT o.c FROM unnest($3::text[], $4::int8[]) AS o(t, c) \
                            WHERE o.t = {t}), $1::int8)"
            )
        };
        let purge_candidate = |bound: &str| {
            format!(
                "(SELECT min(t) FROM ( \
                   (SELECT y.tenant AS t FROM {d} y \
                     WHERE y.status IN ('succeeded', 'dead') AND y.completed_at < {yc} \
                       AND y.tenant > {bound} \
                     ORDER BY y.tenant LIMIT 1) \
                   UNION ALL \
                   (SELECT x.tenant FROM {m} x \
                     WHERE x.created_at < {xc} AND x.tenant > {bound} \
                       AND NOT EXISTS ({no_delivery}) \
                     ORDER BY x.tenant LIMIT 1)) cand)",
                yc = cut("y.tenant"),
                xc = cut("x.tenant"),
            )
        };
        let purge_pick_tenant = format!(
            "SELECT coalesce({}, {}) AS tenant",
            purge_candidate("$2::text"),
            purge_candidate("''")
        );
        let purge_deliveries = format!(
            "WITH v AS ( \
               SELECT id FROM {d} \
                WHERE tenant = $1::text AND status IN ('succeeded', 'dead') \
                  AND completed_at < $2::int8 \
                ORDER BY completed_at, seq LIMIT $3::int8 \
                FOR UPDATE SKIP LOCKED), \
             da AS (DELETE FROM {a} x USING v WHERE x.delivery_id = v.id), \
             dd AS (DELETE FROM {d} x USING v WHERE x.id = v.id RETURNING 1) \
             SELECT count(*) AS n FROM dd"
        );
        let purge_messages = format!(
            "WITH v AS ( \
               SELECT x.id FROM {m} x \
                WHERE x.tenant = $1::text AND x.created_at < $2::int8 \
                  AND NOT EXISTS ({no_delivery}) \
                ORDER BY x.created_at, x.id LIMIT $3::int8 \
                FOR UPDATE SKIP LOCKED), \
             dm AS (DELETE FROM {m} x USING v WHERE x.id = v.id RETURNING 1) \
             SELECT count(*) AS n FROM dm"
        );
        let set_purge_cursor = format!("UPDATE {p} SET tenant = $1::text WHERE singleton");

        Sql {
            schema: s,
            enqueue_one,
            enqueue_many,
            find_idempotent,
            claim,
            complete,
            release,
            extend,
            mark_sending,
            release_held,
            replay,
            retry_now,
            hold_for_endpoint,
            reset,
            status_of,
            stats,
            get_delivery,
            get_message,
            list_deliveries,
            attempts,
            insert_endpoint,
            get_endpoint,
            lock_endpoint,
            list_endpoints,
            update_endpoint,
            delete_endpoint,
            put_consumer,
            list_consumers,
            delete_consumer,
            lock_purge_cursor,
            purge_pick_tenant,
            purge_deliveries,
            purge_messages,
            set_purge_cursor,
        }
    }
}
