//! Unit tests of `conn.rs`: the group commit and the header checks before opening.

use super::*;
use outboxkit_core::Stopwatch;

/// Bodies queued behind each other share one commit, yet each keeps its own outcome: a
/// failing body rolls back alone, the others commit, and no result reaches its caller
/// before its writes are committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_commit_keeps_each_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let config = SqliteConfig::new(dir.path().join("group.db"));
    let pool = Arc::new(Pool::open(&config, Timestamp::from_unix_millis(0).unwrap()).unwrap());
    pool.write_tx(|tx| {
        tx.execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY)")?;
        Ok(())
    })
    .await
    .unwrap();
    // Hold the writer thread so the bodies below queue up behind it.
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let held = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.write(move |_| {
                let _ = started_tx.send(());
                let _ = hold_rx.recv();
                Ok(())
            })
            .await
        })
    };
    // The writer thread is inside the holding job before any body is queued.
    started_rx.await.unwrap();
    let mut calls = Vec::new();
    for n in 0..40_i64 {
        let pool = pool.clone();
        calls.push(tokio::spawn(async move {
            pool.write_tx(move |tx| {
                tx.execute("INSERT INTO t (n) VALUES (?1)", [n])?;
                if n % 3 == 0 {
                    // Written, then failed: the insert must not survive.
                    return Err(SqliteError::Corrupt("a failing body"));
                }
                let seen: i64 =
                    tx.query_row("SELECT count(*) FROM t WHERE n = ?1", [n], |r| r.get(0))?;
                Ok(seen)
            })
            .await
        }));
    }
    while pool.queued.load(Ordering::Acquire) < 41 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    hold_tx.send(()).unwrap();
    held.await.unwrap().unwrap();
    for (n, call) in calls.into_iter().enumerate() {
        let out = call.await.unwrap();
        if n % 3 == 0 {
            assert!(out.is_err(), "body {n} failed");
        } else {
            assert_eq!(out.unwrap(), 1, "body {n} saw its own write");
        }
    }
    let stored: Vec<i64> = pool
        .write_tx(|tx| {
            let mut stmt = tx.prepare("SELECT n FROM t ORDER BY n")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
        .unwrap();
    let expected: Vec<i64> = (0..40).filter(|n| n % 3 != 0).collect();
    assert_eq!(stored, expected);
    // The thread counts a job down just after handing over its result.
    let watch = Stopwatch::start();
    while pool.queued.load(Ordering::Acquire) != 0 && watch.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        pool.queued.load(Ordering::Acquire),
        0,
        "every job counted down"
    );
}

#[test]
fn headers_are_checked_before_opening() {
    let dir = std::env::temp_dir().join(format!("outbox-sqlite-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.db");
    assert!(
        check_header(&path).is_ok(),
        "a missing file is a new database"
    );
    std::fs::write(&path, b"").unwrap();
    assert!(
        check_header(&path).is_ok(),
        "an empty file is a new database"
    );
    std::fs::write(&path, b"hello").unwrap();
    assert!(matches!(
        check_header(&path),
        Err(SqliteError::NotADatabase)
    ));
    let mut h = b"SQLite format 3\0".to_vec();
    h.extend_from_slice(&[0x10, 0x00, 1, 1, 0, 64, 32, 32]);
    h.resize(100, 0);
    std::fs::write(&path, &h).unwrap();
    assert!(check_header(&path).is_ok());
    h[16] = 0x03; // page size 768: not a power of two
    std::fs::write(&path, &h).unwrap();
    assert!(matches!(
        check_header(&path),
        Err(SqliteError::NotADatabase)
    ));
    assert!(matches!(check_header(&dir), Err(SqliteError::NotADatabase)));
    std::fs::remove_dir_all(&dir).unwrap();
}
