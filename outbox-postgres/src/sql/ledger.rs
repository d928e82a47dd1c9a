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
    pub(crate) purge_deliveries: Statement,
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
        Ok(Sql {
            list_deliveries: load("list_deliveries")?,
            get_delivery: load("get_delivery")?,
            get_message: load("get_message")?,
            attempts: load("attempts")?,
            lock_purge_cursor: load("lock_purge_cursor")?,
            purge_pick_tenant: load("purge_pick_tenant")?,
            purge_deliveries: load("purge_deliveries")?,
            purge_messages: load("purge_messages")?,
            set_purge_cursor: load("set_purge_cursor")?,
            tenants: load("tenants")?,
            old_partitions: load("old_partitions")?,
        })
    }
}
