//! The whole conformance suite against `InMemoryStore`: directly, behind `Box<dyn Store>`,
//! behind a nested `Arc<dyn Store>`, and through `FaultyStore` at an error ratio of 0.

use std::sync::Arc;

use outboxkit_core::tokens::TokenStore;
use outboxkit_core::Store;
use outboxkit_testing::conformance::Fixture;
use outboxkit_testing::{FaultyStore, InMemoryStore, ManualClock};

fn memory(clock: &Arc<ManualClock>) -> InMemoryStore {
    InMemoryStore::new(clock.clone())
}

/// Each fixture reopens its store as a clone: a second handle to the same data.
fn fixture(store: Arc<dyn Store>, tokens: InMemoryStore, clock: Arc<ManualClock>) -> Fixture {
    let again = store.clone();
    Fixture::new(store, clock)
        .with_reopen(move || {
            let s = again.clone();
            async move { s }
        })
        .with_tokens(Arc::new(tokens) as Arc<dyn TokenStore>)
}

mod direct {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let store = memory(&clock);
        let second = store.clone();
        let tokens = store.clone();
        Some(
            Fixture::new(Arc::new(store), clock)
                .with_reopen(move || {
                    let s: Arc<dyn Store> = Arc::new(second.clone());
                    async move { s }
                })
                .with_tokens(Arc::new(tokens)),
        )
    }

    outboxkit_testing::conformance_tests!(setup);
}

mod boxed {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let m = memory(&clock);
        let store: Arc<dyn Store> = Arc::new(Box::new(m.clone()) as Box<dyn Store>);
        Some(fixture(store, m, clock))
    }

    outboxkit_testing::conformance_tests!(setup);
}

mod nested_arc {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let m = memory(&clock);
        let store: Arc<dyn Store> = Arc::new(Arc::new(m.clone()) as Arc<dyn Store>);
        Some(fixture(store, m, clock))
    }

    outboxkit_testing::conformance_tests!(setup);
}

mod faulty_at_zero {
    use super::*;

    async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
        let m = memory(&clock);
        let store: Arc<dyn Store> = Arc::new(FaultyStore::new(m.clone(), 42).error_ratio(0.0));
        Some(fixture(store, m, clock))
    }

    outboxkit_testing::conformance_tests!(setup);
}
