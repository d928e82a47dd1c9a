//! Claim groups: each (tenant, kind, target) — a tenant's consumer, endpoint or e-mail
//! recipient — has a small integer id in `outbox_groups` (schema 15), and every delivery
//! carries its group's id in `grp`, the leading column of the claim and barrier indexes.
//! Group rows are never deleted or changed and ids are never reused.
//!
//! The writer connection keeps the ids it has seen ([`GroupIds`]), so an enqueue to a known
//! group reads nothing. An id seen inside a transaction that is later rolled back may name
//! no row, or (ids are `max + 1`) the next group inserted: the writer connection's rollback
//! hook counts rollbacks, and the kept ids are dropped whenever the count has moved. Ids
//! read in a transaction that commits are good for as long as the file exists: other
//! connections only add groups.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use outboxkit_core::DestinationKind;
use rusqlite::{params, Connection, OptionalExtension};

use crate::error::Result;

/// The most ids kept (beyond it the copy starts over).
const KEPT: usize = 65_536;

const SELECT_GROUP: &str =
    "SELECT id FROM outbox_groups WHERE tenant = ?1 AND kind = ?2 AND target = ?3";

const INSERT_GROUP: &str = "INSERT INTO outbox_groups (tenant, kind, target) VALUES (?1, ?2, ?3)";

/// The group ids the writer connection has seen.
#[derive(Debug, Default)]
pub(crate) struct GroupIds {
    /// Bumped by the writer connection's rollback hook.
    rollbacks: Arc<AtomicU64>,
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// The rollback count the ids were seen at.
    rollbacks: u64,
    len: usize,
    /// Per tenant, per kind (handler, webhook, email), target → id.
    ids: HashMap<String, [HashMap<String, i64>; 3]>,
}

fn slot(kind: DestinationKind) -> usize {
    match kind {
        DestinationKind::Handler => 0,
        DestinationKind::Webhook => 1,
        DestinationKind::Email => 2,
    }
}

impl GroupIds {
    /// Ids kept across the transactions of a connection whose rollbacks bump `rollbacks`.
    pub(crate) fn new(rollbacks: Arc<AtomicU64>) -> Self {
        GroupIds {
            rollbacks,
            kept: Mutex::default(),
        }
    }

    /// The id of the group, as `conn` (the writer, inside the enqueue's transaction) sees
    /// it: kept, else read, else created.
    pub(crate) fn id(
        &self,
        conn: &Connection,
        tenant: &str,
        kind: DestinationKind,
        target: &str,
    ) -> Result<i64> {
        let rollbacks = self.rollbacks.load(Ordering::SeqCst);
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.rollbacks != rollbacks || kept.len >= KEPT {
            *kept = Kept {
                rollbacks,
                ..Kept::default()
            };
        }
        if let Some(id) = kept.ids.get(tenant).and_then(|k| k[slot(kind)].get(target)) {
            return Ok(*id);
        }
        let id = group_id(conn, tenant, kind, target)?;
        kept.ids.entry(tenant.to_owned()).or_default()[slot(kind)].insert(target.to_owned(), id);
        kept.len += 1;
        Ok(id)
    }
}

/// The id of the group as `conn`'s transaction sees it, created when there is none.
pub(crate) fn group_id(
    conn: &Connection,
    tenant: &str,
    kind: DestinationKind,
    target: &str,
) -> Result<i64> {
    let found: Option<i64> = conn
        .prepare_cached(SELECT_GROUP)?
        .query_row(params![tenant, kind.as_str(), target], |r| r.get(0))
        .optional()?;
    if let Some(id) = found {
        return Ok(id);
    }
    conn.prepare_cached(INSERT_GROUP)?
        .execute(params![tenant, kind.as_str(), target])?;
    Ok(conn.last_insert_rowid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE outbox_groups (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, \
             kind TEXT NOT NULL, target TEXT NOT NULL, UNIQUE (tenant, kind, target))",
        )
        .unwrap();
        conn
    }

    #[test]
    fn an_id_seen_in_a_rolled_back_transaction_is_not_kept() {
        let mut conn = schema();
        let rollbacks = Arc::new(AtomicU64::new(0));
        let hook = rollbacks.clone();
        conn.rollback_hook(Some(move || {
            hook.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
        let ids = GroupIds::new(rollbacks);
        // Created inside a transaction that is rolled back: id 1, then gone.
        conn.execute_batch("BEGIN").unwrap();
        let a = ids.id(&conn, "t", DestinationKind::Handler, "a").unwrap();
        assert_eq!(a, 1);
        conn.execute_batch("ROLLBACK").unwrap();
        // Another group now takes id 1; the first one, asked again, gets an id of its own.
        conn.execute_batch("BEGIN").unwrap();
        let b = ids.id(&conn, "t", DestinationKind::Webhook, "b").unwrap();
        let a = ids.id(&conn, "t", DestinationKind::Handler, "a").unwrap();
        conn.execute_batch("COMMIT").unwrap();
        assert_eq!(b, 1);
        assert_eq!(a, 2, "not the id of the rolled-back row");
        let stored: i64 = conn
            .query_row(
                "SELECT id FROM outbox_groups WHERE tenant = 't' AND kind = 'handler' \
                 AND target = 'a'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(stored, a);
    }

    #[test]
    fn a_kept_id_is_used_without_reading_and_kinds_do_not_mix() {
        let conn = schema();
        let ids = GroupIds::default();
        let h = ids.id(&conn, "t", DestinationKind::Handler, "x").unwrap();
        let w = ids.id(&conn, "t", DestinationKind::Webhook, "x").unwrap();
        let other = ids.id(&conn, "u", DestinationKind::Handler, "x").unwrap();
        assert_eq!((h, w, other), (1, 2, 3));
        // The table emptied behind its back (no file ever does this): the kept id is used.
        conn.execute_batch("DELETE FROM outbox_groups").unwrap();
        assert_eq!(
            ids.id(&conn, "t", DestinationKind::Webhook, "x").unwrap(),
            2
        );
        // Unkept: read (here created) again.
        assert_eq!(
            group_id(&conn, "t", DestinationKind::Webhook, "x").unwrap(),
            1
        );
    }
}
