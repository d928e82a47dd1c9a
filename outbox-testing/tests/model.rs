//! The model-based test on the in-memory store, with more runs than the other stores give it
//! (the model itself is `outboxkit_testing::conformance::model`).

use std::sync::Arc;

use outboxkit_testing::conformance::{model, Fixture};
use outboxkit_testing::{InMemoryStore, ManualClock, SeededEntropy};

async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
    let store = InMemoryStore::new(clock.clone()).with_entropy(SeededEntropy::new(1));
    Some(Fixture::new(Arc::new(store), clock))
}

#[test]
fn the_in_memory_store_follows_the_model() {
    model::check_model(setup, 256);
}
