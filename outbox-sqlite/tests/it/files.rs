//! Opening: bad files are refused and left byte for byte as they were; good files keep
//! their data and the application's own tables.

use std::path::Path;

use outboxkit_core::{ErrorKind, Ledger, MessageStore, NewMessage, OsEntropy, TenantId};
use outboxkit_sqlite::{SqliteConfig, SqliteStore, MIGRATION_VERSIONS, SCHEMA_VERSION};
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::open;

async fn refused(path: &Path) -> outboxkit_core::Error {
    SqliteStore::open(
        SqliteConfig::new(path),
        ManualClock::new(),
        std::sync::Arc::new(OsEntropy),
    )
    .await
    .expect_err("the file must be refused")
}

fn sidecars(path: &Path) -> Vec<String> {
    ["-wal", "-shm", "-journal"]
        .iter()
        .map(|s| format!("{}{s}", path.display()))
        .filter(|p| Path::new(p).exists())
        .collect()
}

/// Open `bytes` written to a file: the open fails with `Misconfigured`, the file is
/// unchanged, and SQLite left no files beside it.
async fn assert_refused_untouched(name: &str, bytes: &[u8]) -> outboxkit_core::Error {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let err = refused(&path).await;
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert_eq!(err.field(), Some("path"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file was modified"
    );
    assert_eq!(sidecars(&path), Vec::<String>::new());
    err
}

#[tokio::test(flavor = "multi_thread")]
async fn a_text_file_is_refused_untouched() {
    let text = "name,amount\nalice,10\nbob,20\n".repeat(200);
    let err = assert_refused_untouched("orders.csv", text.as_bytes()).await;
    assert!(err.message().contains("not a sqlite database"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_file_is_refused_untouched() {
    assert_refused_untouched("short.db", b"SQLite format 3\0").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valid_header_over_garbage_is_refused_untouched() {
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend_from_slice(&[0x10, 0x00, 1, 1, 0, 64, 32, 32]);
    bytes.resize(100, 0);
    bytes.extend((0..8092u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    let err = assert_refused_untouched("garbage.db", &bytes).await;
    assert!(err.message().contains("corrupt"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_with_a_corrupt_schema_page_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT);
             INSERT INTO orders (note) VALUES ('a'), ('b'), ('c');",
        )
        .unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    for b in &mut bytes[100..600] {
        *b = 0xa5;
    }
    let err = assert_refused_untouched("app.db", &bytes).await;
    assert!(err.message().contains("corrupt"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused(dir.path()).await;
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_in_a_missing_directory_is_misconfigured() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused(&dir.path().join("no-such-dir").join("outbox.db")).await;
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert_eq!(err.field(), Some("path"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    drop(open(&path, ManualClock::new()).await);
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "INSERT INTO outbox_schema_version (version, applied_at) VALUES (?1, 0)",
        [SCHEMA_VERSION + 1],
    )
    .unwrap();
    drop(conn);
    let err = refused(&path).await;
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(err.message().contains("newer"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn reopening_keeps_data_and_the_applications_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY); INSERT INTO orders VALUES (1);",
        )
        .unwrap();
    let first = open(&path, ManualClock::new()).await;
    let e = first
        .enqueue(NewMessage::new("order.created", serde_json::json!(1)))
        .await
        .unwrap();
    drop(first);
    let second = open(&path, ManualClock::new()).await;
    second
        .get_message(&TenantId::default(), e.message_id)
        .await
        .expect("the message survives a reopen");
    let conn = Connection::open(&path).unwrap();
    let orders: i64 = conn
        .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
        .unwrap();
    assert_eq!(orders, 1);
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM outbox_schema_version ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(versions, MIGRATION_VERSIONS.to_vec());
    assert_eq!(versions.last(), Some(&SCHEMA_VERSION));
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}
