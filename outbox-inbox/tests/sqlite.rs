//! The inbox on a SQLite file: the record commits with the effect or not at all, and two
//! connections racing on one id apply it once.

mod common;

use std::time::Duration;

use common::{inbox, secret, signed, NOW_S};
use outboxkit_inbox::sqlite::InboxTable;
use outboxkit_inbox::{Received, Recorded};
use rusqlite::{Connection, TransactionBehavior};

fn event(id: &str) -> Received {
    let body = format!("{{\"id\":\"{id}\"}}").into_bytes();
    let h = signed(&secret(), id, NOW_S, &body);
    inbox().check(&h[..], &body).unwrap()
}

fn open(path: &std::path::Path) -> Connection {
    let c = Connection::open(path).unwrap();
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c.execute_batch("PRAGMA journal_mode = WAL").unwrap();
    c
}

fn apply(c: &mut Connection, table: &InboxTable, e: &Received, commit: bool) -> Recorded {
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let r = table.record(&tx, e, NOW_S * 1000).unwrap();
    if r == Recorded::First {
        tx.execute("INSERT INTO effects VALUES (?1, ?2)", (&e.id, &e.body))
            .unwrap();
    }
    if commit {
        tx.commit().unwrap();
    } else {
        tx.rollback().unwrap();
    }
    r
}

fn effects(c: &Connection, id: &str) -> i64 {
    c.query_row(
        "SELECT count(*) FROM effects WHERE webhook_id = ?1",
        [id],
        |r| r.get(0),
    )
    .unwrap()
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf, InboxTable) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let c = open(&path);
    let table = InboxTable::new("inbox", "orders").unwrap();
    table.migrate(&c).unwrap();
    table.migrate(&c).expect("migrating twice is a no-op");
    c.execute_batch("CREATE TABLE effects (webhook_id TEXT NOT NULL, body BLOB NOT NULL)")
        .unwrap();
    (dir, path, table)
}

#[test]
fn a_rolled_back_effect_leaves_no_record_and_a_committed_one_is_never_applied_again() {
    let (_dir, path, table) = setup();
    let mut c = open(&path);
    let e = event("msg_1");
    assert_eq!(apply(&mut c, &table, &e, false), Recorded::First);
    assert_eq!(effects(&c, "msg_1"), 0);
    assert_eq!(apply(&mut c, &table, &e, true), Recorded::First);
    assert_eq!(apply(&mut c, &table, &e, true), Recorded::Duplicate);
    assert_eq!(effects(&c, "msg_1"), 1);
}

#[test]
fn two_connections_racing_on_one_id_apply_it_once() {
    let (_dir, path, table) = setup();
    let e = event("msg_race");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (path, table, e) = (path.clone(), table.clone(), e.clone());
            std::thread::spawn(move || apply(&mut open(&path), &table, &e, true))
        })
        .collect();
    let results: Vec<Recorded> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        results.iter().filter(|r| **r == Recorded::First).count(),
        1,
        "{results:?}"
    );
    assert_eq!(effects(&open(&path), "msg_race"), 1);
}

#[test]
fn purge_removes_old_records_in_bounded_batches() {
    let (_dir, path, table) = setup();
    let c = open(&path);
    for i in 0..15 {
        table
            .record(&c, &event(&format!("old_{i}")), 1_000)
            .unwrap();
    }
    table.record(&c, &event("new"), 5_000).unwrap();
    assert_eq!(table.purge(&c, 2_000, 10).unwrap(), 10);
    assert_eq!(table.purge(&c, 2_000, 10).unwrap(), 5);
    assert_eq!(table.purge(&c, 2_000, 10).unwrap(), 0);
    assert_eq!(
        table.record(&c, &event("new"), 6_000).unwrap(),
        Recorded::Duplicate
    );
}
