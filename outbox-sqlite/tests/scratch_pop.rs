use std::sync::Arc;
use outbox_core::*;
use outbox_sqlite::*;
use outbox_testing::ManualClock;

#[tokio::test(flavor = "multi_thread")]
async fn pop() {
    let path = std::path::PathBuf::from("/tmp/pop.db");
    let _ = std::fs::remove_file(&path);
    let clock = ManualClock::new();
    let store = SqliteStore::open(SqliteConfig::new(&path), clock.clone(), Arc::new(OsEntropy)).await.unwrap();
    store.put_consumer(&Consumer { name: ConsumerName::new("w").unwrap(), filter: TopicFilter::all(), created_at: clock.now() }).await.unwrap();
    for chunk in 0..10 {
        let msgs = (0..5000).map(|i| NewMessage::new("a.b", serde_json::json!(chunk * 5000 + i))).collect();
        store.enqueue_batch(msgs).await.unwrap();
    }
}
