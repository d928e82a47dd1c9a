//! The ledger's statements, loaded from `ledger.sql` (bound by `ledger.rs`): the reads,
//! attempts and the retention purge.

use crate::rows::{delivery_cols, MESSAGE_COLS};
use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::Result;

/// The ledger statements of one store (`sql/ledger.sql`), parsed once with the store's
/// table names.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) list_deliveries: Statement,
    pub(crate) get_delivery: Statement,
    pub(crate) get_message: Statement,
    pub(crate) attempts: Statement,
    pub(crate) lock_purge_cursor: Statement,
    pub(crate) purge_pick_tenant: Statement,
    pub(crate) history_parts: Statement,
    /// `purge_partition`'s text, rendered per partition (`{part}`) by
    /// [`Sql::purge_partition`].
    purge_partition: &'static str,
    pub(crate) purge_messages_of: Statement,
    pub(crate) purge_messages: Statement,
    pub(crate) set_purge_cursor: Statement,
    pub(crate) tenants: Statement,
    pub(crate) old_partitions: Statement,
}

impl Sql {
    pub fn new(t: &Tables) -> Result<Self> {
        let dcols = delivery_cols("d");
        let mut names = t.names().to_vec();
        names.extend([
            ("delivery_cols", dcols.as_str()),
            ("message_cols", MESSAGE_COLS),
        ]);
        let load = |name| sql::load(sql::LEDGER, name, &names);
        // The pick's two halves: `pick_half` after the cursor, then from the start up to it.
        let half = sql::section(sql::LEDGER, "pick_half")?;
        let pick = sql::section(sql::LEDGER, "purge_pick_tenant")?
            .replace(
                "{pick_after}",
                &half.replace("{after}", ":last::text").replace("{upto}", ""),
            )
            .replace(
                "{pick_wrap}",
                &half
                    .replace("{after}", "''")
                    .replace("{upto}", "AND x.tenant <= :last::text"),
            );
        let purge_partition = sql::section(sql::LEDGER, "purge_partition")?;
        // Parsed once here too, so a typo fails when the store opens.
        let mut with_part = names.clone();
        with_part.push(("part", "p"));
        Statement::new(purge_partition, &with_part)?;
        Ok(Sql {
            list_deliveries: load("list_deliveries")?,
            get_delivery: load("get_delivery")?,
            get_message: load("get_message")?,
            attempts: load("attempts")?,
            lock_purge_cursor: load("lock_purge_cursor")?,
            purge_pick_tenant: Statement::new(&pick, &names)?,
            history_parts: load("history_parts")?,
            purge_partition,
            purge_messages_of: load("purge_messages_of")?,
            purge_messages: load("purge_messages")?,
            set_purge_cursor: load("set_purge_cursor")?,
            tenants: load("tenants")?,
            old_partitions: load("old_partitions")?,
        })
    }

    /// `purge_partition` for the history's partition `part` (a name the catalog gave).
    pub(crate) fn purge_partition(&self, t: &Tables, part: &str) -> Result<Statement> {
        let mut names = t.names().to_vec();
        names.push(("part", part));
        Statement::new(self.purge_partition, &names)
    }
}
