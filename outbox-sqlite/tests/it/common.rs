//! Helpers shared by the integration tests.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{ClaimRequest, Clock, MessageStore};
use outboxkit_core::{
    Claimed, Completion, Consumer, ConsumerName, EndpointStore, Lease, OsEntropy, TopicFilter,
    Verdict,
};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::ManualClock;

/// The lease the tests claim with.
pub const LEASE: Duration = Duration::from_secs(60);

/// Open a store on `path` that reads time from `clock`.
pub async fn open(path: &Path, clock: Arc<ManualClock>) -> SqliteStore {
    open_with(SqliteConfig::new(path), clock).await
}

/// Open a store with a config.
pub async fn open_with(config: SqliteConfig, clock: Arc<ManualClock>) -> SqliteStore {
    SqliteStore::open(config, clock, Arc::new(OsEntropy))
        .await
        .expect("open the sqlite store")
}

/// Register the consumer `name` for `filter`.
pub async fn consumer(store: &SqliteStore, clock: &ManualClock, name: &str, filter: &str) {
    store
        .put_consumer(&Consumer {
            name: ConsumerName::new(name).unwrap(),
            filter: TopicFilter::parse(filter).unwrap(),
            created_at: clock.now(),
            status: outboxkit_core::ConsumerStatus::Active,
        })
        .await
        .expect("put_consumer");
}

/// A store on a fresh file (kept while the returned directory lives) with the consumer
/// `worker` and one message enqueued for it.
pub async fn one_message() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Arc<ManualClock>,
    SqliteStore,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.db");
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "worker", "*").await;
    store
        .enqueue(outboxkit_core::NewMessage::new(
            "order.created",
            serde_json::json!({}),
        ))
        .await
        .unwrap();
    (dir, path, clock, store)
}

/// A claim of up to `batch` deliveries to the consumer `name`.
pub fn claim_for(name: &str, batch: u32) -> ClaimRequest {
    ClaimRequest::new(batch, LEASE).handler(ConsumerName::new(name).unwrap(), 10)
}

/// Complete a claim as succeeded (no attempt record needed for these tests).
pub fn succeeded(c: &Claimed) -> (Lease, Completion) {
    (
        c.lease.clone(),
        Completion {
            verdict: Verdict::Succeeded,
            attempt: None,
        },
    )
}

/// A file at schema `version`: the table of applied versions, then the shipped migrations up
/// to `version`, each recorded as applied at `applied_at` (what the store itself writes).
pub fn file_at_version(path: &Path, version: i64, applied_at: i64) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE outbox_schema_version (version INTEGER NOT NULL PRIMARY KEY, \
                                             applied_at INTEGER NOT NULL)",
    )
    .unwrap();
    for m in outboxkit_sqlite::migrations()
        .into_iter()
        .filter(|m| m.version <= version)
    {
        conn.execute_batch(m.sql).unwrap();
        conn.execute(
            "INSERT INTO outbox_schema_version VALUES (?1, ?2)",
            (m.version, applied_at),
        )
        .unwrap();
    }
    conn
}

/// Every row `sql` returns, each column as text (`NULL` for null), to compare a table's
/// contents before and after an upgrade.
pub fn rows_of(conn: &rusqlite::Connection, sql: &str) -> Vec<Vec<String>> {
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        (0..n)
            .map(|i| {
                Ok(match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => "NULL".to_owned(),
                    rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                    rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                    other => format!("{other:?}"),
                })
            })
            .collect::<rusqlite::Result<Vec<String>>>()
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}
