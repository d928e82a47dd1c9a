//! Helpers shared by the integration tests.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{ClaimRequest, Clock};
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
