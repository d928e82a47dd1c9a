//! The whole conformance suite against `SqliteStore`, each case on a fresh temporary file,
//! with a second handle (its own connections) on the same file.

use std::sync::Arc;

use outboxkit_core::{OsEntropy, Store};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::conformance::Fixture;
use outboxkit_testing::ManualClock;

async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    let store = SqliteStore::open(config.clone(), clock.clone(), Arc::new(OsEntropy))
        .await
        .expect("open the sqlite store");
    let reopen_clock = clock.clone();
    let fixture = Fixture::new(Arc::new(store.clone()), clock)
        .with_tokens(Arc::new(store))
        .with_reopen(move || {
            let (config, clock) = (config.clone(), reopen_clock.clone());
            async move {
                let second = SqliteStore::open(config, clock, Arc::new(OsEntropy))
                    .await
                    .expect("open a second handle");
                Arc::new(second) as Arc<dyn Store>
            }
        })
        .with_cleanup(async move { drop(dir) });
    Some(fixture)
}

outboxkit_testing::conformance_tests!(setup);
