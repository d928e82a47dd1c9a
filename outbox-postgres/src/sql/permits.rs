//! The rate-limit permit statement, loaded from `permits.sql` (bound by `permits.rs`).

use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::Result;

/// The permit statement of one store, parsed once with the store's table name.
pub(crate) fn statement(t: &Tables) -> Result<Statement> {
    let table = format!("{}.endpoint_permits", t.schema);
    sql::load(
        sql::PERMITS,
        "take_permits",
        &[("endpoint_permits", &table)],
    )
}
