//! The operator calls' statement texts: release held, replay, retry now, reset and the
//! stats (bound by `deliveries.rs`).

use crate::rows::{ROW_COLS, UNFINISHED};
use crate::schema::Tables;

/// The operator statements of one store.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) release_held: String,
    pub(crate) hold_for_endpoint: String,
    pub(crate) replay: String,
    pub(crate) retry_now: String,
    pub(crate) reset: String,
    pub(crate) status_of: String,
    pub(crate) stats: String,
    pub(crate) queue_stats: String,
}

impl Sql {
    pub fn new(t: &Tables) -> Self {
        Sql {
            release_held: release_held_text(t),
            hold_for_endpoint: hold_for_endpoint_text(t),
            replay: replay_text(t),
            retry_now: retry_now_text(t),
            reset: reset_text(t),
            status_of: format!(
                "SELECT status FROM {d} d WHERE id = $1::uuid AND tenant = $2::text",
                d = t.all
            ),
            stats: stats_text(t, &t.all),
            queue_stats: stats_text(
                t,
                &format!(
                    "(SELECT status FROM {} WHERE status IN {UNFINISHED})",
                    t.deliveries
                ),
            ),
        }
    }
}

/// `WITH u AS (<update returning 1>) SELECT count, notify-if-any`.
pub(crate) fn counted_with_notify(update: &str, channel_param: &str) -> String {
    format!(
        "WITH u AS ({update} RETURNING 1), n AS (SELECT count(*) AS n FROM u) \
         SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify({channel_param}, '')::text END AS notified \
         FROM n"
    )
}

/// Release an endpoint's held deliveries: $1 tenant, $2 endpoint id, $3 now, $4 channel
/// (bound by [`PostgresStore::release_held_now`] and, inside their transactions, by the
/// endpoint update and delete).
pub(crate) fn release_held_text(t: &Tables) -> String {
    let d = &t.deliveries;
    counted_with_notify(
        &format!(
            "UPDATE {d} SET status = 'pending', next_attempt_at = $3::int8, \
                    updated_at = $3::int8 \
              WHERE status = 'held' AND target = $2::text AND kind = 'webhook' \
                AND tenant = $1::text"
        ),
        "$4::text",
    )
}

/// Hold an endpoint's waiting deliveries: $1 tenant, $2 endpoint id, $3 until, $4 now
/// (bound by the endpoint update).
pub(crate) fn hold_for_endpoint_text(t: &Tables) -> String {
    let d = &t.deliveries;
    format!(
        "UPDATE {d} SET status = 'held', next_attempt_at = $3::int8, updated_at = $4::int8 \
          WHERE status IN ('pending', 'held') AND target = $2::text AND kind = 'webhook' \
            AND tenant = $1::text"
    )
}

/// Replay a dead delivery: it moves from the history back to the hot table, in its first
/// place in enqueue order (same `seq`), with a fresh run.
pub(crate) fn replay_text(t: &Tables) -> String {
    let (d, done) = (&t.deliveries, &t.done);
    format!(
        "WITH x AS ( \
           DELETE FROM {done} WHERE id = $1::uuid AND tenant = $2::text AND status = 'dead' \
           RETURNING *), \
         u AS ( \
           INSERT INTO {d} ({ROW_COLS}) \
           SELECT seq, id, message_id, tenant, topic, ordering_key, kind, target, 'pending', \
                  0, 0, $3::int8, NULL, NULL, last_outcome, last_status_code, last_excerpt, \
                  last_at, NULL, ledger_len, created_at, $3::int8, NULL, run + 1, due_at \
             FROM x \
           RETURNING 1), \
         n AS (SELECT count(*) AS n FROM u) \
         SELECT n.n, CASE WHEN n.n > 0 THEN pg_notify($4::text, '')::text END AS notified \
           FROM n"
    )
}

pub(crate) fn retry_now_text(t: &Tables) -> String {
    let d = &t.deliveries;
    counted_with_notify(
        &format!(
            "UPDATE {d} SET status = 'pending', next_attempt_at = $3::int8, \
                    updated_at = $3::int8 \
              WHERE id = $1::uuid AND tenant = $2::text AND status IN ('pending', 'held')"
        ),
        "$4::text",
    )
}

pub(crate) fn reset_text(t: &Tables) -> String {
    let d = &t.deliveries;
    counted_with_notify(
        &format!(
            "UPDATE {d} SET status = 'pending', attempts = 0, snoozes = 0, \
                    next_attempt_at = $3::int8, updated_at = $3::int8 \
              WHERE id = $1::uuid AND tenant = $2::text AND status = 'held'"
        ),
        "$4::text",
    )
}

/// Counts per status (both tables) and the oldest due time (the hot table's): $1 now.
/// Counts per status over `from` (a table or a subquery) and the oldest due
/// delivery.
pub(crate) fn stats_text(t: &Tables, from: &str) -> String {
    let d = &t.deliveries;
    format!(
        "SELECT count(*) FILTER (WHERE status = 'pending') AS pending, \
                count(*) FILTER (WHERE status = 'processing') AS processing, \
                count(*) FILTER (WHERE status = 'sending') AS sending, \
                count(*) FILTER (WHERE status = 'succeeded') AS succeeded, \
                count(*) FILTER (WHERE status = 'held') AS held, \
                count(*) FILTER (WHERE status = 'dead') AS dead, \
                (SELECT min(next_attempt_at) FROM {d} \
                  WHERE status IN {UNFINISHED} AND next_attempt_at <= $1::int8) AS oldest \
           FROM {from} x"
    )
}
