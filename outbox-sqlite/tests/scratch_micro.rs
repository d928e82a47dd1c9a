use outbox_core::Stopwatch;
use rusqlite::Connection;

fn setup(fk: bool) -> Connection { setup_drop(fk, "") }
fn setup_drop(fk: bool, drop: &str) -> Connection {
    std::fs::copy("/tmp/pop.db", "/tmp/micro.db").unwrap();
    let _ = std::fs::remove_file("/tmp/micro.db-wal");
    let c = Connection::open("/tmp/micro.db").unwrap();
    c.execute_batch(&format!("PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; PRAGMA foreign_keys={};", if fk {"ON"} else {"OFF"})).unwrap();
    c.execute_batch(drop).unwrap();
    // claim everything: processing with token = id
    c.execute_batch("UPDATE outbox_deliveries SET status='processing', claim_token=id, attempts=1, lease_until=1, next_attempt_at=1").unwrap();
    c
}

fn ids(c: &Connection) -> Vec<String> {
    c.prepare("SELECT id FROM outbox_deliveries ORDER BY seq LIMIT 20000").unwrap().query_map([], |r| r.get(0)).unwrap().collect::<Result<_,_>>().unwrap()
}

fn run(name: &str, fk: bool, f: impl Fn(&Connection, &[String])) { run_drop(name, fk, "", f) }
fn run_drop(name: &str, fk: bool, drop: &str, f: impl Fn(&Connection, &[String])) {
    let c = setup_drop(fk, drop);
    let ids = ids(&c);
    let sw = Stopwatch::start();
    for chunk in ids.chunks(500) {
        let tx = c.unchecked_transaction().unwrap();
        f(&tx, chunk);
        tx.commit().unwrap();
    }
    eprintln!("{name}: {:.1} us/item", sw.elapsed().as_secs_f64() * 1e6 / ids.len() as f64);
}

const SETTLE: &str = "UPDATE outbox_deliveries SET status = ?4, attempts = ?5, snoozes = ?6, next_attempt_at = ?7, completed_at = ?8, dead_reason = ?9, last_outcome = CASE WHEN ?10 THEN ?11 ELSE last_outcome END, last_status_code = CASE WHEN ?10 THEN ?12 ELSE last_status_code END, last_excerpt = CASE WHEN ?10 THEN ?13 ELSE last_excerpt END, last_at = CASE WHEN ?10 THEN ?14 ELSE last_at END, claim_token = NULL, lease_until = NULL, claimed_from = NULL, updated_at = ?15, attempt_count = attempt_count + ?16 WHERE id = ?1 AND tenant = ?2 AND claim_token = ?3 AND status IN ('processing', 'sending')";

fn settle(c: &Connection, id: &str, returning: bool) -> i64 {
    let p = rusqlite::params![id, "default", id, "succeeded", 1, 0, 5, 5, None::<String>, true, "succeeded", None::<i64>, None::<String>, 5, 5, 1];
    if returning {
        c.prepare_cached(&format!("{SETTLE} RETURNING attempt_count")).unwrap().query_row(p, |r| r.get(0)).unwrap()
    } else {
        c.prepare_cached(SETTLE).unwrap().execute(p).unwrap();
        1
    }
}

fn attempt(c: &Connection, id: &str, n: i64) {
    c.prepare_cached("INSERT INTO outbox_attempts (delivery_id, number, probe, started_at, finished_at, outcome, status_code, excerpt) VALUES (?1, ?2, 0, 1, 2, 'succeeded', NULL, NULL)").unwrap().execute(rusqlite::params![id, n]).unwrap();
}

#[test]
fn micro() {
    let bare = |c: &Connection, ids: &[String]| for id in ids { c.prepare_cached("UPDATE outbox_deliveries SET status='succeeded', completed_at=5 WHERE id=?1 AND claim_token=?1").unwrap().execute([id]).unwrap(); };
    run_drop("bare, no exhausted", false, "DROP INDEX outbox_deliveries_exhausted", bare);
    run_drop("bare, no finished", false, "DROP INDEX outbox_deliveries_finished", bare);
    run_drop("bare, no held", false, "DROP INDEX outbox_deliveries_held", bare);
    run_drop("bare, no barrier", false, "DROP INDEX outbox_deliveries_barrier", bare);
    run_drop("bare, no due", false, "DROP INDEX outbox_deliveries_due", bare);
    run_drop("bare, none", false, "DROP INDEX outbox_deliveries_due; DROP INDEX outbox_deliveries_barrier; DROP INDEX outbox_deliveries_held; DROP INDEX outbox_deliveries_finished; DROP INDEX outbox_deliveries_exhausted;", bare);
    run("settle returning + attempt, fk on", true, |c, ids| for id in ids { let n = settle(c, id, true); attempt(c, id, n); });
    run("settle returning + attempt, fk off", false, |c, ids| for id in ids { let n = settle(c, id, true); attempt(c, id, n); });
    run("settle returning only, fk on", true, |c, ids| for id in ids { settle(c, id, true); });
    run("settle execute only, fk on", true, |c, ids| for id in ids { settle(c, id, false); });
    run("settle execute only, fk off", false, |c, ids| for id in ids { settle(c, id, false); });
    run("bare update", false, |c, ids| for id in ids { c.prepare_cached("UPDATE outbox_deliveries SET status='succeeded', completed_at=5 WHERE id=?1 AND claim_token=?1").unwrap().execute([id]).unwrap(); });
    run("bare update token only", false, |c, ids| for id in ids { c.prepare_cached("UPDATE outbox_deliveries SET claim_token=NULL WHERE id=?1 AND claim_token=?1").unwrap().execute([id]).unwrap(); });
}
