//! Query text, one constant per statement (each prepared once per connection and cached).
//!
//! Lists of values (consumers with their budgets, excluded and dormant topics, ids) are
//! bound as one JSON text and read with `json_each`, so each statement's text is fixed and
//! its prepared form is reused.

// ---- enqueue ----

pub(crate) const INSERT_MESSAGE: &str = concat!(
    "INSERT INTO outbox_messages (",
    message_cols!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
     ON CONFLICT (tenant, topic, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
);

pub(crate) const SELECT_IDEMPOTENT: &str = "SELECT id FROM outbox_messages \
     WHERE tenant = ?1 AND topic = ?2 AND idempotency_key = ?3";

pub(crate) const INSERT_DELIVERY: &str = "INSERT INTO outbox_deliveries \
     (id, message_id, tenant, topic, ordering_key, kind, target, status, attempts, snoozes, \
      next_attempt_at, created_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

pub(crate) const SELECT_CONSUMERS: &str =
    "SELECT name, filter, created_at FROM outbox_consumers ORDER BY name";

pub(crate) const SELECT_TENANT_ENDPOINTS: &str = concat!(
    "SELECT ",
    endpoint_read_cols!(),
    " FROM outbox_endpoints WHERE tenant = ?1 ORDER BY created_at, id"
);

// ---- operator calls ----

pub(crate) const RELEASE_HELD: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', next_attempt_at = ?3, updated_at = ?3 \
     WHERE tenant = ?1 AND kind = 'webhook' AND target = ?2 AND status = 'held' \
       AND status IN ('pending', 'held', 'processing', 'sending')";

/// Make the endpoint's pending and held deliveries wait for it (a pause or disable).
pub(crate) const HOLD_FOR_ENDPOINT: &str = "UPDATE outbox_deliveries \
     SET status = 'held', next_attempt_at = ?3, updated_at = ?4 \
     WHERE tenant = ?1 AND kind = 'webhook' AND target = ?2 AND status IN ('pending', 'held') \
       AND status IN ('pending', 'held', 'processing', 'sending')";

pub(crate) const DELIVERY_STATUS: &str =
    "SELECT status FROM outbox_deliveries WHERE id = ?1 AND tenant = ?2";

pub(crate) const REPLAY: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', attempts = 0, snoozes = 0, next_attempt_at = ?3, \
         dead_reason = NULL, completed_at = NULL, updated_at = ?3, run = run + 1 \
     WHERE id = ?1 AND tenant = ?2 AND status = 'dead'";

pub(crate) const RETRY_NOW: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', next_attempt_at = ?3, updated_at = ?3 \
     WHERE id = ?1 AND tenant = ?2 AND status IN ('pending', 'held')";

pub(crate) const RESET: &str = "UPDATE outbox_deliveries \
     SET status = 'pending', attempts = 0, snoozes = 0, next_attempt_at = ?3, updated_at = ?3 \
     WHERE id = ?1 AND tenant = ?2 AND status = 'held'";

pub(crate) const STATS_COUNTS: &str =
    "SELECT status, count(*) FROM outbox_deliveries GROUP BY status";

pub(crate) const STATS_OLDEST_DUE: &str = "SELECT min(next_attempt_at) FROM outbox_deliveries \
     WHERE status IN ('pending', 'held', 'processing', 'sending') AND next_attempt_at <= ?1";

/// Counts of one tenant (and one endpoint when `?2` is not NULL).
pub(crate) const TENANT_STATS_COUNTS: &str = "SELECT status, count(*) FROM outbox_deliveries \
     WHERE tenant = ?1 AND (?2 IS NULL OR (kind = 'webhook' AND target = ?2)) GROUP BY status";

pub(crate) const TENANT_STATS_OLDEST_DUE: &str = "SELECT min(next_attempt_at) \
     FROM outbox_deliveries \
     WHERE tenant = ?1 AND (?2 IS NULL OR (kind = 'webhook' AND target = ?2)) \
       AND status IN ('pending', 'held', 'processing', 'sending') AND next_attempt_at <= ?3";

/// Counts per tenant and status.
pub(crate) const TENANTS_COUNTS: &str =
    "SELECT tenant, status, count(*) FROM outbox_deliveries GROUP BY tenant, status";

/// The oldest due claimable delivery per tenant.
pub(crate) const TENANTS_OLDEST_DUE: &str = "SELECT tenant, min(next_attempt_at) \
     FROM outbox_deliveries \
     WHERE status IN ('pending', 'held', 'processing', 'sending') AND next_attempt_at <= ?1 \
     GROUP BY tenant";

/// Messages per tenant.
pub(crate) const TENANTS_MESSAGES: &str =
    "SELECT tenant, count(*) FROM outbox_messages GROUP BY tenant";

// ---- ledger ----

pub(crate) const LIST_DELIVERIES: &str = concat!(
    "SELECT ",
    delivery_cols!(),
    " FROM outbox_deliveries \
     WHERE tenant = :tenant \
       AND (:status IS NULL OR status = :status) \
       AND (:endpoint IS NULL OR (kind = 'webhook' AND target = :endpoint)) \
       AND (:consumer IS NULL OR (kind = 'handler' AND target = :consumer)) \
       AND (:kind IS NULL OR kind = :kind) \
       AND (:topic IS NULL OR topic = :topic) \
       AND (:since IS NULL OR created_at >= :since) \
       AND (:until IS NULL OR created_at < :until) \
       AND (:okey IS NULL OR ordering_key = :okey) \
       AND (:text IS NULL \
         OR instr(lower(last_excerpt), :text) > 0 \
         OR EXISTS (SELECT 1 FROM outbox_attempts AS a \
                    WHERE a.delivery_seq = outbox_deliveries.seq \
                      AND instr(lower(a.excerpt), :text) > 0)) \
       AND (:cursor_at IS NULL OR (created_at, id) < (:cursor_at, :cursor_id)) \
     ORDER BY created_at DESC, id DESC \
     LIMIT :limit"
);

pub(crate) const GET_DELIVERY: &str = concat!(
    "SELECT ",
    delivery_cols!(),
    " FROM outbox_deliveries WHERE id = ?1 AND tenant = ?2"
);

pub(crate) const GET_MESSAGE: &str = concat!(
    "SELECT ",
    message_cols!(),
    " FROM outbox_messages WHERE id = ?1 AND tenant = ?2"
);

pub(crate) const ATTEMPTS: &str = "SELECT d.id, a.number, a.probe, a.started_at, \
     a.finished_at, a.outcome, a.status_code, a.excerpt, a.run, a.scheduled_at \
     FROM outbox_attempts AS a JOIN outbox_deliveries AS d ON d.seq = a.delivery_seq \
     WHERE d.id = ?1 ORDER BY a.number";

/// The payload of a delivery's message (the attempts' fingerprint).
pub(crate) const DELIVERY_PAYLOAD: &str = "SELECT m.payload FROM outbox_messages AS m \
     JOIN outbox_deliveries AS d ON d.message_id = m.id WHERE d.id = ?1";

// ---- retention ----

pub(crate) const PURGE_CURSOR: &str = "SELECT tenant FROM outbox_purge_cursor WHERE id = 1";

pub(crate) const PURGE_SET_CURSOR: &str = "INSERT INTO outbox_purge_cursor (id, tenant) \
     VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant";

/// The first tenant after `?2` with a finished delivery completed before its cutoff: the
/// tenant's entry in the JSON object `?3`, else `?1`.
pub(crate) const PURGE_NEXT_TENANT_DELIVERIES: &str =
    "SELECT d.tenant FROM outbox_deliveries AS d \
     WHERE d.status IN ('succeeded', 'dead') AND d.tenant > ?2 \
       AND d.completed_at < coalesce((SELECT value FROM json_each(?3) WHERE key = d.tenant), ?1) \
     ORDER BY d.tenant LIMIT 1";

/// The first tenant after `?2` with a message created before its cutoff (as above) and no
/// deliveries left.
pub(crate) const PURGE_NEXT_TENANT_MESSAGES: &str = "SELECT m.tenant FROM outbox_messages AS m \
     WHERE m.tenant > ?2 \
       AND m.created_at < coalesce((SELECT value FROM json_each(?3) WHERE key = m.tenant), ?1) \
       AND NOT EXISTS (SELECT 1 FROM outbox_deliveries AS d WHERE d.message_id = m.id) \
     ORDER BY m.tenant LIMIT 1";

pub(crate) const PURGE_PICK_DELIVERIES: &str = "SELECT seq FROM outbox_deliveries \
     WHERE tenant = ?1 AND status IN ('succeeded', 'dead') AND completed_at < ?2 \
     ORDER BY completed_at, seq LIMIT ?3";

pub(crate) const PURGE_DELETE_ATTEMPTS: &str =
    "DELETE FROM outbox_attempts WHERE delivery_seq IN (SELECT value FROM json_each(?1))";

pub(crate) const PURGE_DELETE_DELIVERIES: &str =
    "DELETE FROM outbox_deliveries WHERE seq IN (SELECT value FROM json_each(?1))";

pub(crate) const PURGE_DELETE_MESSAGES: &str = "DELETE FROM outbox_messages WHERE id IN ( \
       SELECT m.id FROM outbox_messages AS m \
       WHERE m.tenant = ?1 AND m.created_at < ?2 \
         AND NOT EXISTS (SELECT 1 FROM outbox_deliveries AS d WHERE d.message_id = m.id) \
       ORDER BY m.created_at, m.id LIMIT ?3)";

// ---- endpoints and consumers ----

pub(crate) const INSERT_ENDPOINT: &str = concat!(
    "INSERT INTO outbox_endpoints (",
    endpoint_cols!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
);

pub(crate) const GET_ENDPOINT: &str = concat!(
    "SELECT ",
    endpoint_read_cols!(),
    " FROM outbox_endpoints WHERE id = ?1 AND tenant = ?2"
);

pub(crate) const UPDATE_ENDPOINT: &str = "UPDATE outbox_endpoints \
     SET url = ?3, description = ?4, filter = ?5, status = ?6, disabled_reason = ?7, \
         secret = ?8, previous_secret = ?9, body_format = ?10, rate_limit = ?11, \
         created_at = ?12, updated_at = ?13 \
     WHERE id = ?1 AND tenant = ?2";

pub(crate) const DELETE_ENDPOINT: &str =
    "DELETE FROM outbox_endpoints WHERE id = ?1 AND tenant = ?2";

pub(crate) const UPSERT_CONSUMER: &str = "INSERT INTO outbox_consumers (name, filter, created_at) \
     VALUES (?1, ?2, ?3) \
     ON CONFLICT (name) DO UPDATE SET filter = excluded.filter, created_at = excluded.created_at";

pub(crate) const DELETE_CONSUMER: &str = "DELETE FROM outbox_consumers WHERE name = ?1";
