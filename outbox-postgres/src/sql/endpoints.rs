//! The endpoint and consumer statements, loaded from `endpoints.sql` (bound by
//! `endpoints.rs`).

use crate::schema::Tables;
use crate::sql::{self, Statement};
use outboxkit_core::Result;

/// The endpoint and consumer statements of one store (`sql/endpoints.sql`), parsed once
/// with the store's table names.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) insert_endpoint: Statement,
    pub(crate) update_endpoint: Statement,
    pub(crate) get_endpoint: Statement,
    pub(crate) lock_endpoint: Statement,
    pub(crate) list_endpoints: Statement,
    pub(crate) delete_endpoint: Statement,
    pub(crate) put_consumer: Statement,
    pub(crate) list_consumers: Statement,
    pub(crate) delete_consumer: Statement,
    pub(crate) set_consumer_status: Statement,
    pub(crate) hold_for_consumer: Statement,
    pub(crate) release_for_consumer: Statement,
}

impl Sql {
    pub fn new(t: &Tables) -> Result<Self> {
        let tables = [
            ("endpoints", t.endpoints.as_str()),
            ("consumers", t.consumers.as_str()),
            ("queue", t.queue.as_str()),
            ("groups", t.groups.as_str()),
            ("messages", t.messages.as_str()),
        ];
        let load = |name| sql::load(sql::ENDPOINTS, name, &tables);
        Ok(Sql {
            insert_endpoint: load("insert_endpoint")?,
            update_endpoint: load("update_endpoint")?,
            get_endpoint: load("get_endpoint")?,
            lock_endpoint: load("lock_endpoint")?,
            list_endpoints: load("list_endpoints")?,
            delete_endpoint: load("delete_endpoint")?,
            put_consumer: load("put_consumer")?,
            list_consumers: load("list_consumers")?,
            delete_consumer: load("delete_consumer")?,
            set_consumer_status: load("set_consumer_status")?,
            hold_for_consumer: load("hold_for_consumer")?,
            release_for_consumer: load("release_for_consumer")?,
        })
    }
}
