//! The enqueue statements, loaded from `enqueue.sql` (bound by `enqueue.rs`): one message,
//! a batch, the lookup of an idempotent duplicate, and the statements of a batch written with
//! `COPY` (its destinations, the two copies, the wake-up).

use crate::rows::MESSAGE_COLS;
use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::endpoint::DISABLED_HOLD;
use outboxkit_core::{Result, Timestamp};

/// The enqueue statements of one store (`sql/enqueue.sql`), parsed once with the store's
/// table names and the hold times of core (`EndpointStatus::hold_until`).
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) one: Statement,
    pub(crate) many: Statement,
    pub(crate) find_idempotent: Statement,
    pub(crate) routes: Statement,
    pub(crate) copy_messages: Statement,
    pub(crate) copy_queue: Statement,
    pub(crate) notify: Statement,
}

impl Sql {
    pub fn new(t: &Tables) -> Result<Self> {
        let never = Timestamp::MAX.as_unix_millis().to_string();
        let hold = DISABLED_HOLD.as_millis().to_string();
        let mut names = t.names().to_vec();
        names.extend([
            ("message_cols", MESSAGE_COLS),
            ("never", never.as_str()),
            ("disabled_hold", hold.as_str()),
        ]);
        let load = |name| sql::load(sql::ENQUEUE, name, &names);
        // The batch forms' routing and groups (`batch_routes`, `batch_groups`) are written once
        // and pasted into both before they are parsed.
        let batch_routes = sql::section(sql::ENQUEUE, "batch_routes")?;
        let batch_groups = sql::section(sql::ENQUEUE, "batch_groups")?;
        let with_routes = |name| -> Result<Statement> {
            let text = sql::section(sql::ENQUEUE, name)?
                .replace("{batch_routes}", batch_routes)
                .replace("{batch_groups}", batch_groups);
            Statement::new(&text, &names)
        };
        Ok(Sql {
            one: load("one")?,
            many: with_routes("many")?,
            find_idempotent: load("find_idempotent")?,
            routes: with_routes("routes")?,
            copy_messages: load("copy_messages")?,
            copy_queue: load("copy_queue")?,
            notify: load("notify")?,
        })
    }
}
