//! The schema: the migrations shipped with this crate (the `.sql` files beside this one)
//! and the runner that applies them on open.

use std::time::Duration;

use outboxkit_core::Timestamp;
use rusqlite::{Connection, TransactionBehavior};

use crate::error::retry_busy;
use crate::error::{Result, SqliteError};

/// The schema versions this crate knows, oldest first.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("0001_init.sql")),
    (2, include_str!("0002_hold.sql")),
    (3, include_str!("0003_ledger.sql")),
    (4, include_str!("0004_claim_groups.sql")),
    (5, include_str!("0005_tokens.sql")),
    (6, include_str!("0006_lean_deliveries.sql")),
    (7, include_str!("0007_enqueue_tokens.sql")),
    (8, include_str!("0008_endpoint_permits.sql")),
    (9, include_str!("0009_fifo.sql")),
    (10, include_str!("0010_endpoint_headers.sql")),
    (11, include_str!("0011_event_types.sql")),
    (12, include_str!("0012_consumer_pause.sql")),
    (13, include_str!("0013_attempt_detail.sql")),
    (14, include_str!("0014_console.sql")),
    (15, include_str!("0015_claim_group_ids.sql")),
    (16, include_str!("0016_folded_attempt.sql")),
];

/// The version of every migration, oldest first.
pub(crate) const MIGRATION_VERSIONS: &[i64] =
    &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

const _: () = {
    // MIGRATION_VERSIONS lists exactly the versions of MIGRATIONS.
    assert!(MIGRATION_VERSIONS.len() == MIGRATIONS.len());
    let mut i = 0;
    while i < MIGRATIONS.len() {
        assert!(MIGRATION_VERSIONS[i] == MIGRATIONS[i].0);
        i += 1;
    }
};

/// The newest schema version (the last migration's).
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Bring the schema to [`SCHEMA_VERSION`] in one immediate transaction.
pub(crate) fn migrate(conn: &mut Connection, busy_timeout: Duration, now: Timestamp) -> Result<()> {
    retry_busy(busy_timeout, || {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS outbox_schema_version (\
                 version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )?;
        let current: i64 = tx.query_row(
            "SELECT coalesce(max(version), 0) FROM outbox_schema_version",
            [],
            |r| r.get(0),
        )?;
        if current > SCHEMA_VERSION {
            return Err(SqliteError::SchemaTooNew {
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        // Every known migration not recorded yet, in order (not only those above the
        // newest recorded one), so a migration numbered below one already applied still
        // runs.
        let applied: Vec<i64> = tx
            .prepare("SELECT version FROM outbox_schema_version")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| !applied.contains(v)) {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO outbox_schema_version (version, applied_at) VALUES (?1, ?2)",
                (version, now.as_unix_millis()),
            )?;
            tracing::info!(version, "applied the outbox sqlite schema migration");
        }
        tx.commit()?;
        Ok(())
    })
}

/// One schema migration shipped with this crate, for applications that run migrations with
/// their own tooling instead of letting [`crate::SqliteStore::open`] apply them. The tables
/// are prefixed `outbox_`, so the SQL can run in the application's own file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The version, counting from 1; applied in order.
    pub version: i64,
    /// The SQL.
    pub sql: &'static str,
}

/// Every migration this crate ships, oldest first.
pub fn migrations() -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .map(|&(version, sql)| Migration { version, sql })
        .collect()
}

/// One SQL script for a file without the outbox tables: every migration, each followed by the
/// `outbox_schema_version` row the store writes, so a store opened on the file afterwards
/// finds the schema current and applies nothing. Run it in one transaction. (SQLite has no
/// conditional blocks: to upgrade a file at an older version, apply only the newer
/// [`migrations`] and record them the same way.)
pub fn migration_script() -> String {
    let mut out = format!(
        "-- outboxkit-sqlite {} schema\n\
         CREATE TABLE IF NOT EXISTS outbox_schema_version (\
         version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL);\n",
        env!("CARGO_PKG_VERSION")
    );
    for m in migrations() {
        out.push_str(&format!(
            "\n-- migration {v}\n{sql}\nINSERT INTO outbox_schema_version (version, applied_at) \
             VALUES ({v}, CAST(unixepoch('subsec') * 1000 AS INTEGER));\n",
            v = m.version,
            sql = m.sql.trim_end(),
        ));
    }
    out
}
