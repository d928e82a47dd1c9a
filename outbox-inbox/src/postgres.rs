//! The inbox table on PostgreSQL, written in the application's own transaction.
//!
//! `record` inserts the id with `ON CONFLICT DO NOTHING`: a second transaction recording the
//! same id waits on the primary key until the first ends, then finds it (the first
//! committed: [`Recorded::Duplicate`]) or inserts it itself (the first rolled back:
//! [`Recorded::First`]). Concurrent duplicates therefore run the handler exactly once.

use sqlx::postgres::{PgConnection, PgPool};
use sqlx::AssertSqlSafe;

use crate::{check_identifier, Received, Recorded};

/// One inbox table: `"<schema>"."<table>"` with the columns `source`, `webhook_id` (the
/// primary key together) and `received_at` (unix milliseconds, for retention).
#[derive(Debug, Clone)]
pub struct InboxTable {
    name: String,
    source: String,
}

impl InboxTable {
    /// The table `table` in `schema`, for ids from the sender `source` (a short name; ids of
    /// different senders never collide). Both names must be plain identifiers.
    pub fn new(schema: &str, table: &str, source: &str) -> outboxkit_core::Result<Self> {
        check_identifier(schema, "inbox schema")?;
        check_identifier(table, "inbox table")?;
        Ok(InboxTable {
            name: format!("\"{schema}\".\"{table}\""),
            source: source.to_owned(),
        })
    }

    /// The table's DDL, idempotent, for an application's own migration tooling.
    pub fn migration_sql(&self) -> String {
        let t = &self.name;
        let schema = t.split('.').next().unwrap_or_default();
        format!(
            "CREATE SCHEMA IF NOT EXISTS {schema};\n\
             CREATE TABLE IF NOT EXISTS {t} (\n    \
                 source text COLLATE \"C\" NOT NULL,\n    \
                 webhook_id text COLLATE \"C\" NOT NULL,\n    \
                 received_at bigint NOT NULL,\n    \
                 PRIMARY KEY (source, webhook_id));\n\
             CREATE INDEX IF NOT EXISTS {idx} ON {t} (received_at);\n",
            idx = self.index_name(),
        )
    }

    fn index_name(&self) -> String {
        let table = self.name.rsplit('.').next().unwrap_or_default();
        format!("\"{}_received\"", table.trim_matches('"'))
    }

    /// Run [`InboxTable::migration_sql`] (in one transaction).
    pub async fn migrate(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        let mut tx = pool.begin().await?;
        sqlx::raw_sql(AssertSqlSafe(self.migration_sql()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// Record `event`'s id in the caller's transaction `tx` at `received_at_ms` (unix
    /// milliseconds). Apply the event in the same transaction when this returns
    /// [`Recorded::First`]; commit either way.
    pub async fn record(
        &self,
        tx: &mut PgConnection,
        event: &Received,
        received_at_ms: i64,
    ) -> Result<Recorded, sqlx::Error> {
        let text = format!(
            "INSERT INTO {} (source, webhook_id, received_at) VALUES ($1, $2, $3) \
             ON CONFLICT DO NOTHING",
            self.name
        );
        // The names were checked as plain identifiers by `new`.
        let done = sqlx::query(AssertSqlSafe(text))
            .bind(&self.source)
            .bind(&event.id)
            .bind(received_at_ms)
            .execute(&mut *tx)
            .await?;
        Ok(if done.rows_affected() == 1 {
            Recorded::First
        } else {
            Recorded::Duplicate
        })
    }

    /// Delete up to `limit` records received before `before_ms` (past the sender's retry
    /// horizon); returns how many. Call it until it returns less than `limit`.
    pub async fn purge(
        &self,
        pool: &PgPool,
        before_ms: i64,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        let text = format!(
            "DELETE FROM {t} WHERE ctid = ANY (ARRAY( \
               SELECT ctid FROM {t} WHERE received_at < $1 ORDER BY received_at LIMIT $2 \
               FOR UPDATE SKIP LOCKED))",
            t = self.name
        );
        let done = sqlx::query(AssertSqlSafe(text))
            .bind(before_ms)
            .bind(limit)
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    }
}
