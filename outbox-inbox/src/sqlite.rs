//! The inbox table on SQLite, written in the application's own `rusqlite` transaction.
//!
//! SQLite serialises writers: a second writer recording the same id waits for the first (or
//! fails with `SQLITE_BUSY` past its busy timeout, and its transaction is retried), then
//! finds the id when the first committed. Open write transactions with
//! `TransactionBehavior::Immediate` so the check and the effect see one state.

use rusqlite::{params, Connection};

use crate::{check_identifier, Received, Recorded};

/// One inbox table `<table>` with the columns `source`, `webhook_id` (the primary key
/// together) and `received_at` (unix milliseconds, for retention).
#[derive(Debug, Clone)]
pub struct InboxTable {
    name: String,
    source: String,
}

impl InboxTable {
    /// The table `table`, for ids from the sender `source`. `table` must be a plain
    /// identifier.
    pub fn new(table: &str, source: &str) -> outboxkit_core::Result<Self> {
        check_identifier(table, "inbox table")?;
        Ok(InboxTable {
            name: table.to_owned(),
            source: source.to_owned(),
        })
    }

    /// The table's DDL, idempotent, for an application's own migration tooling.
    pub fn migration_sql(&self) -> String {
        let t = &self.name;
        format!(
            "CREATE TABLE IF NOT EXISTS \"{t}\" (\n    \
                 source TEXT NOT NULL,\n    \
                 webhook_id TEXT NOT NULL,\n    \
                 received_at INTEGER NOT NULL,\n    \
                 PRIMARY KEY (source, webhook_id)) WITHOUT ROWID;\n\
             CREATE INDEX IF NOT EXISTS \"{t}_received\" ON \"{t}\" (received_at);\n"
        )
    }

    /// Run [`InboxTable::migration_sql`] on `conn`.
    pub fn migrate(&self, conn: &Connection) -> rusqlite::Result<()> {
        conn.execute_batch(&self.migration_sql())
    }

    /// Record `event`'s id in the caller's transaction (any connection inside one: a
    /// `rusqlite::Transaction` derefs to its `Connection`) at `received_at_ms`. Apply the
    /// event in the same transaction when this returns [`Recorded::First`].
    pub fn record(
        &self,
        tx: &Connection,
        event: &Received,
        received_at_ms: i64,
    ) -> rusqlite::Result<Recorded> {
        let text = format!(
            "INSERT INTO \"{}\" (source, webhook_id, received_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT DO NOTHING",
            self.name
        );
        let n =
            tx.prepare_cached(&text)?
                .execute(params![self.source, event.id, received_at_ms])?;
        Ok(if n == 1 {
            Recorded::First
        } else {
            Recorded::Duplicate
        })
    }

    /// Delete up to `limit` records received before `before_ms`; returns how many. Call it
    /// until it returns less than `limit`.
    pub fn purge(&self, conn: &Connection, before_ms: i64, limit: i64) -> rusqlite::Result<usize> {
        let t = &self.name;
        conn.execute(
            &format!(
                "DELETE FROM \"{t}\" WHERE (source, webhook_id) IN ( \
                   SELECT source, webhook_id FROM \"{t}\" WHERE received_at < ?1 \
                    ORDER BY received_at LIMIT ?2)"
            ),
            params![before_ms, limit],
        )
    }
}
