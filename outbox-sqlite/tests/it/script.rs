//! The migrations as SQL for users' own tooling: the script builds the schema the store
//! builds, records it so the store applies nothing, and the store works on the file.

use outboxkit_core::DeliveryStoreExt;
use outboxkit_core::{DeliveryStore, MessageStore, NewMessage};
use outboxkit_sqlite::{migration_script, migrations, MIGRATION_VERSIONS, SCHEMA_VERSION};
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::{claim_for, consumer, open, succeeded};

#[tokio::test]
async fn the_migration_script_builds_what_the_store_builds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let mut conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
            .unwrap();
        let tx = conn.transaction().unwrap();
        tx.execute_batch(&migration_script()).unwrap();
        tx.commit().unwrap();
        let versions: Vec<i64> = conn
            .prepare("SELECT version FROM outbox_schema_version ORDER BY version")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let shipped: Vec<i64> = migrations().iter().map(|m| m.version).collect();
        assert_eq!(versions, shipped);
        assert_eq!(versions.last(), Some(&SCHEMA_VERSION));
    }
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "worker", "*").await;
    store
        .enqueue(NewMessage::new("note.saved", serde_json::json!({"id": 1})))
        .await
        .unwrap();
    let claimed = store.claim(&claim_for("worker", 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let (lease, done) = succeeded(&claimed[0]);
    store.complete(&lease, &done).await.unwrap();
    // The application's own table is untouched beside the outbox's.
    let conn = Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM notes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
    let applied: i64 = conn
        .query_row("SELECT count(*) FROM outbox_schema_version", [], |r| {
            r.get(0)
        })
        .unwrap();
    // One row per migration (the numbers may have gaps).
    assert_eq!(
        applied,
        MIGRATION_VERSIONS.len() as i64,
        "the store applied nothing more"
    );
}
