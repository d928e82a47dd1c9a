//! The whole conformance suite against `InMemoryStore`: directly, behind `Box<dyn Store>`,
//! behind a nested `Arc<dyn Store>`, and through `FaultyStore` at an error ratio of 0.

use std::sync::Arc;

use outboxkit_core::Store;
use outboxkit_testing::conformance::Fixture;
use outboxkit_testing::{FaultyStore, InMemoryStore, ManualClock};

fn memory(clock: &Arc<ManualClock>) -> InMemoryStore {
    InMemoryStore::new(clock.clone())
}

/// Each fixture reopens its store as a clone: a second handle to the same data.
fn fixture(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Fixture {
    let again = store.clone();
    Fixture::new(store, clock).with_reopen(move || {
        let s = again.clone();
        async move { s }
    })
}

mod direct {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let store = memory(&clock);
        let second = store.clone();
        Some(Fixture::new(Arc::new(store), clock).with_reopen(move || {
            let s: Arc<dyn Store> = Arc::new(second.clone());
            async move { s }
        }))
    }

    outboxkit_testing::conformance_tests!(setup);
}

mod boxed {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let store: Arc<dyn Store> = Arc::new(Box::new(memory(&clock)) as Box<dyn Store>);
        Some(fixture(store, clock))
    }

    outboxkit_testing::conformance_tests!(setup);
}

mod nested_arc {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let store: Arc<dyn Store> = Arc::new(Arc::new(memory(&clock)) as Arc<dyn Store>);
        Some(fixture(store, clock))
    }

    outboxkit_testing::conformance_tests!(setup);
}

mod faulty_at_zero {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let store: Arc<dyn Store> = Arc::new(FaultyStore::new(memory(&clock), 42).error_ratio(0.0));
        Some(fixture(store, clock))
    }

    outboxkit_testing::conformance_tests!(setup);
}
