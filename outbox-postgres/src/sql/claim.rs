//! The hot-path statements, loaded from `claim.sql` (bound by `claim/`): the fair claim and
//! the completion, release, extend and mark-sending writes.

use std::sync::atomic::AtomicBool;

use crate::rows::{delivery_cols, ROW_COLS};
use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::Result;

/// The hot-path statements of one store (`sql/claim.sql`), parsed once with the store's
/// table names.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) claim: Statement,
    pub(crate) complete: Statement,
    pub(crate) release: Statement,
    pub(crate) extend: Statement,
    pub(crate) mark_sending: Statement,
    /// Whether the next claim may use the cached generic plan (see `claim/mod.rs`'s
    /// `claim_mode`): the last claim filled its batch and the hot table was large enough.
    pub(crate) generic: AtomicBool,
}

impl Sql {
    pub fn new(t: &Tables) -> Result<Self> {
        let dcols = delivery_cols("d");
        let bound = outboxkit_core::claim_rules::EXHAUSTED_PER_CLAIM.to_string();
        let literal = format!("'{}'", t.deliveries.replace('\'', "''"));
        let names = [
            ("deliveries", t.deliveries.as_str()),
            ("deliveries_literal", literal.as_str()),
            ("done", t.done.as_str()),
            ("messages", t.messages.as_str()),
            ("attempts", t.attempts.as_str()),
            ("endpoints", t.endpoints.as_str()),
            ("row_cols", ROW_COLS),
            ("delivery_cols", dcols.as_str()),
            ("exhausted_bound", bound.as_str()),
        ];
        let load = |name| sql::load(sql::CLAIM, name, &names);
        Ok(Sql {
            claim: load("claim")?,
            complete: load("complete")?,
            release: load("release")?,
            extend: load("extend")?,
            mark_sending: load("mark_sending")?,
            generic: AtomicBool::new(false),
        })
    }
}
