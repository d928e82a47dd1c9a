//! The operator statements, loaded from `deliveries.sql` (bound by `deliveries.rs`, and
//! `release_held`/`hold_for_endpoint` by `endpoints.rs` too).

use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::Result;

/// The operator statements of one store (`sql/deliveries.sql`), parsed once with the
/// store's table names.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) release_held: Statement,
    pub(crate) hold_for_endpoint: Statement,
    pub(crate) replay: Statement,
    pub(crate) retry_now: Statement,
    pub(crate) reset: Statement,
    pub(crate) cancel: Statement,
    pub(crate) cancel_message: Statement,
    pub(crate) status_of: Statement,
    pub(crate) stats: Statement,
    pub(crate) queue_stats: Statement,
    pub(crate) tenant_stats: Statement,
}

impl Sql {
    pub fn new(t: &Tables) -> Result<Self> {
        let tables = t.names();
        let load = |name| sql::load(sql::DELIVERIES, name, &tables);
        Ok(Sql {
            release_held: load("release_held")?,
            hold_for_endpoint: load("hold_for_endpoint")?,
            replay: load("replay")?,
            retry_now: load("retry_now")?,
            reset: load("reset")?,
            cancel: load("cancel")?,
            cancel_message: load("cancel_message")?,
            status_of: load("status_of")?,
            stats: load("stats")?,
            queue_stats: load("queue_stats")?,
            tenant_stats: load("tenant_stats")?,
        })
    }
}
