//! The hot-path statements, loaded from `claim.sql` (bound by `claim/`): the fair claim and
//! the completion, release, extend and mark-sending writes.

use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::Result;

/// The hot-path statements of one store (`sql/claim.sql`), parsed once with the store's
/// table names.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) claim: Statement,
    pub(crate) complete: Statement,
    pub(crate) complete_finished: Statement,
    pub(crate) release: Statement,
    pub(crate) extend: Statement,
    pub(crate) mark_sending: Statement,
    pub(crate) history_ensure: Statement,
}

impl Sql {
    pub fn new(t: &Tables) -> Result<Self> {
        let bound = outboxkit_core::claim_rules::EXHAUSTED_PER_CLAIM.to_string();
        let mut names = t.names().to_vec();
        names.push(("exhausted_bound", bound.as_str()));
        let load = |name| sql::load(sql::CLAIM, name, &names);
        // The claim's per-row condition is written once (`claimable`) and pasted into each of
        // its scans before the statement is parsed.
        let claim = sql::section(sql::CLAIM, "claim")?
            .replace("{claimable}", sql::section(sql::CLAIM, "claimable")?);
        // The completion's shared parts are written once and pasted into both forms.
        let completion = |name, settled| -> Result<String> {
            Ok(sql::section(sql::CLAIM, name)?
                .replace(
                    "{complete_input}",
                    sql::section(sql::CLAIM, "complete_input")?,
                )
                .replace(
                    "{complete_finish}",
                    sql::section(sql::CLAIM, "complete_finish")?,
                )
                .replace(
                    "{complete_endpoints}",
                    sql::section(sql::CLAIM, "complete_endpoints")?,
                )
                .replace("{settled}", settled))
        };
        Ok(Sql {
            claim: Statement::new(&claim, &names)?,
            complete: Statement::new(&completion("complete", "res")?, &names)?,
            complete_finished: Statement::new(&completion("complete_finished", "fin")?, &names)?,
            release: load("release")?,
            extend: load("extend")?,
            mark_sending: load("mark_sending")?,
            history_ensure: load("history_ensure")?,
        })
    }
}
