//! The ledger's statement texts: attempts and the retention purge; the reads are in
//! `ledger.sql` (bound by `ledger.rs`).

use crate::rows::{delivery_cols, MESSAGE_COLS};
use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::Result;

/// The ledger statements of one store.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) list_deliveries: Statement,
    pub(crate) get_delivery: Statement,
    pub(crate) get_message: Statement,
    pub(crate) attempts: String,
    pub(crate) purge: PurgeSql,
}

/// The statements of a purge, in the order it runs them.
#[derive(Debug)]
pub(crate) struct PurgeSql {
    pub(crate) lock_purge_cursor: String,
    pub(crate) purge_pick_tenant: String,
    pub(crate) purge_deliveries: String,
    pub(crate) purge_messages: String,
    pub(crate) set_purge_cursor: String,
}

impl Sql {
    pub fn new(t: &Tables) -> Result<Self> {
        let dcols = delivery_cols("d");
        let names = [
            ("all", t.all.as_str()),
            ("attempts", t.attempts.as_str()),
            ("messages", t.messages.as_str()),
            ("delivery_cols", dcols.as_str()),
            ("message_cols", MESSAGE_COLS),
        ];
        let load = |name| sql::load(sql::LEDGER, name, &names);
        Ok(Sql {
            list_deliveries: load("list_deliveries")?,
            get_delivery: load("get_delivery")?,
            get_message: load("get_message")?,
            attempts: attempts_text(t),
            purge: purge_texts(t),
        })
    }
}

/// A delivery's attempts with its payload's fingerprint (one row of NULL attempt columns
/// when it has none): $1 delivery, $2 tenant.
pub(crate) fn attempts_text(t: &Tables) -> String {
    let (d, m, a) = (&t.all, &t.messages, &t.attempts);
    format!(
        "SELECT a.number, a.probe, a.started_at, a.finished_at, a.outcome, a.status_code, \
                a.excerpt, a.run, a.scheduled_at, x.p_size, x.p_sha256 \
           FROM (SELECT y.id, octet_length(z.payload)::int8 AS p_size, \
                        encode(sha256(z.payload), 'hex') AS p_sha256 \
                   FROM {d} y JOIN {m} z ON z.id = y.message_id \
                  WHERE y.id = $1::uuid AND y.tenant = $2::text) x \
           LEFT JOIN {a} a ON a.delivery_id = x.id \
          ORDER BY a.number"
    )
}

/// The purge statements. `lock_purge_cursor` and `set_purge_cursor` ($1 tenant) keep the
/// rotation; `purge_pick_tenant` takes $1 default cutoff, $2 the tenant served last,
/// $3/$4 the per-tenant cutoffs (tenants, times); `purge_deliveries` and `purge_messages`
/// take $1 tenant, $2 cutoff, $3 limit.
pub(crate) fn purge_texts(t: &Tables) -> PurgeSql {
    let (hot, d, m, a, p) = (
        &t.deliveries,
        &t.done,
        &t.messages,
        &t.attempts,
        &t.purge_cursor,
    );
    // A message's deliveries (in either table) share its tenant and created_at: found
    // through the listing indexes, so no index on message_id is needed. One NOT EXISTS per
    // table, not one over their UNION ALL: over the union the planner picked a merge anti
    // join on created_at alone, quadratic when many messages share a created_at (measured:
    // 549 s for 100k messages; two hash anti joins: 88 ms).
    let probe = |table: &str| {
        format!(
            "NOT EXISTS (SELECT 1 FROM {table} y WHERE y.tenant = x.tenant \
               AND y.created_at = x.created_at AND y.message_id = x.id)"
        )
    };
    let no_delivery = format!("{} AND {}", probe(hot), probe(d));
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
                   AND {no_delivery} \
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
              AND {no_delivery} \
            ORDER BY x.created_at, x.id LIMIT $3::int8 \
            FOR UPDATE SKIP LOCKED), \
         dm AS (DELETE FROM {m} x USING v WHERE x.id = v.id RETURNING 1) \
         SELECT count(*) AS n FROM dm"
    );
    let set_purge_cursor = format!("UPDATE {p} SET tenant = $1::text WHERE singleton");
    PurgeSql {
        lock_purge_cursor,
        purge_pick_tenant,
        purge_deliveries,
        purge_messages,
        set_purge_cursor,
    }
}
