//! What an enqueue routes by — every consumer and a tenant's endpoints — kept across the
//! store's own enqueues on its writer connection, so a lone enqueue does not read and parse
//! them again each time (issue 34).
//!
//! The copy is used only while it is exactly what the enqueue's transaction would read:
//! - **Other connections' writes** (other processes, the caller's connection in
//!   `enqueue_in`, the CLI): `PRAGMA data_version` on the writer connection changes whenever
//!   another connection commits, so the copy is kept with the version it was read at.
//! - **The store's own writes** to consumers and endpoints: each holds a [`Change`] from
//!   before it is queued until its transaction has ended (the guard lives in the write's
//!   closure, which the writer thread drops after the commit or rollback). While any is
//!   alive the copy is neither used nor filled (so a copy never holds a change that is
//!   later rolled back), and dropping it bumps a generation the copy must match.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use outboxkit_core::{Consumer, Endpoint, TenantId};
use rusqlite::Connection;

use crate::error::Result;
use crate::groups::GroupIds;
use crate::rows;

/// The most tenants whose endpoints are kept (beyond it the copy starts over).
const TENANTS_KEPT: usize = 1024;

/// Every consumer and one tenant's endpoints.
pub(crate) type Routing = (Arc<[Consumer]>, Arc<[Endpoint]>);

/// The routing copy of one store handle's writer connection.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    /// Own routing writes queued or running.
    pending: AtomicUsize,
    /// Bumped as each own routing write ends.
    generation: AtomicU64,
    copy: Mutex<Option<Copy>>,
    /// The claim-group ids the writer connection has seen.
    pub(crate) groups: GroupIds,
}

#[derive(Debug)]
struct Copy {
    data_version: i64,
    generation: u64,
    consumers: Arc<[Consumer]>,
    endpoints: HashMap<TenantId, Arc<[Endpoint]>>,
}

/// An own write to consumers or endpoints in flight (see the module docs).
#[derive(Debug)]
pub(crate) struct Change(Arc<Routes>);

impl Drop for Change {
    fn drop(&mut self) {
        self.0.generation.fetch_add(1, Ordering::SeqCst);
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A tenant's endpoints, oldest first.
pub(crate) const SELECT_TENANT_ENDPOINTS: &str = concat!(
    "SELECT ",
    endpoint_read_cols!(),
    " FROM outbox_endpoints WHERE tenant = ?1 ORDER BY created_at, id"
);

/// Every consumer, by name.
pub(crate) const SELECT_CONSUMERS: &str =
    "SELECT name, filter, created_at, status FROM outbox_consumers ORDER BY name";

/// Every consumer, as the enqueue's transaction sees them.
pub(crate) fn read_consumers(conn: &Connection) -> Result<Vec<Consumer>> {
    let mut stmt = conn.prepare_cached(SELECT_CONSUMERS)?;
    rows::collect(&mut stmt, rusqlite::params![], rows::consumer)
}

/// A tenant's endpoints, as the enqueue's transaction sees them.
pub(crate) fn read_endpoints(conn: &Connection, tenant: &TenantId) -> Result<Vec<Endpoint>> {
    let mut stmt = conn.prepare_cached(SELECT_TENANT_ENDPOINTS)?;
    rows::collect(&mut stmt, [tenant.as_str()], rows::endpoint)
}

impl Routes {
    /// The copy of a writer connection whose rollbacks bump `rollbacks`.
    pub(crate) fn new(rollbacks: Arc<std::sync::atomic::AtomicU64>) -> Self {
        Routes {
            groups: GroupIds::new(rollbacks),
            ..Routes::default()
        }
    }

    /// Announce an own routing write: hold the guard in the write's closure.
    pub(crate) fn change(self: &Arc<Self>) -> Change {
        self.pending.fetch_add(1, Ordering::SeqCst);
        Change(self.clone())
    }

    /// The consumers and `tenant`'s endpoints as `conn` (the writer, inside the enqueue's
    /// transaction) sees them: the copy when it is current, else read (and kept).
    pub(crate) fn lookup(&self, conn: &Connection, tenant: &TenantId) -> Result<Routing> {
        if self.pending.load(Ordering::SeqCst) != 0 {
            return Ok((
                read_consumers(conn)?.into(),
                read_endpoints(conn, tenant)?.into(),
            ));
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let data_version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        let mut copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
        let current = copy
            .as_ref()
            .is_some_and(|c| c.data_version == data_version && c.generation == generation);
        if !current
            || copy
                .as_ref()
                .is_some_and(|c| c.endpoints.len() >= TENANTS_KEPT)
        {
            *copy = Some(Copy {
                data_version,
                generation,
                consumers: read_consumers(conn)?.into(),
                endpoints: HashMap::new(),
            });
        }
        let Some(c) = copy.as_mut() else {
            return Err(crate::error::SqliteError::Corrupt("routing copy"));
        };
        let endpoints = match c.endpoints.get(tenant) {
            Some(e) => e.clone(),
            None => {
                let e: Arc<[Endpoint]> = read_endpoints(conn, tenant)?.into();
                c.endpoints.insert(tenant.clone(), e.clone());
                e
            }
        };
        Ok((c.consumers.clone(), endpoints))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_in_flight_bypasses_the_copy_and_its_end_invalidates_it() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE outbox_consumers (name TEXT PRIMARY KEY, filter TEXT NOT NULL, \
                                            created_at INTEGER NOT NULL, \
                                            status TEXT NOT NULL DEFAULT 'active'); \
             CREATE TABLE outbox_endpoints (id TEXT, tenant TEXT, url TEXT, description TEXT, \
                 filter TEXT, status TEXT, disabled_reason TEXT, secret BLOB, \
                 previous_secret BLOB, body_format TEXT, rate_limit INTEGER, \
                 created_at INTEGER, updated_at INTEGER, fifo INTEGER, last_outcome TEXT, \
                 last_status_code INTEGER, last_at INTEGER, headers TEXT); \
             INSERT INTO outbox_consumers VALUES ('a', '*', 0, 'active');",
        )
        .unwrap();
        let routes = Arc::new(Routes::default());
        let tenant = TenantId::new("t").unwrap();
        let names = |r: &Routes| -> Vec<String> {
            r.lookup(&conn, &tenant)
                .unwrap()
                .0
                .iter()
                .map(|c| c.name.as_str().to_owned())
                .collect()
        };
        assert_eq!(names(&routes), ["a"]);
        // Own writes do not change data_version: without the guard the copy would be stale.
        let change = routes.change();
        conn.execute(
            "INSERT INTO outbox_consumers VALUES ('b', '*', 0, 'active')",
            [],
        )
        .unwrap();
        assert_eq!(
            names(&routes),
            ["a", "b"],
            "read while the change is in flight"
        );
        drop(change);
        assert_eq!(
            names(&routes),
            ["a", "b"],
            "the change's end invalidates the copy"
        );
        let unchanged = routes.lookup(&conn, &tenant).unwrap().0;
        assert!(Arc::ptr_eq(
            &unchanged,
            &routes.lookup(&conn, &tenant).unwrap().0
        ));
    }
}
