//! The headline guarantee, checked the same way for every store: a message enqueued inside the
//! caller's own transaction (`enqueue_in`) is committed with the caller's write or not at all.
//!
//! Each store's transaction type is its own (a `sqlx::Transaction`, a `rusqlite::Transaction`,
//! a Redis `MULTI` pipeline), so the adapter supplies a [`TxnHarness`] that drives one: the
//! caller's own write (a marker) plus `enqueue_in` of some messages, then commit or roll back.
//! `transaction_tests!(setup)` runs every case here against it:
//!
//! ```
//! use std::sync::Arc;
//! use outboxkit_testing::conformance::txn::{TxnFixture, TxnHarness};
//! use outboxkit_testing::ManualClock;
//!
//! async fn setup(clock: Arc<ManualClock>) -> Option<TxnFixture> {
//!     // A fresh store (as for `conformance_tests!`) and a harness over the same database.
//!     # None
//! }
//!
//! outboxkit_testing::transaction_tests!(setup);
//! # fn main() {}
//! ```

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use outboxkit_core::{ClaimRequest, ConsumerName, DeliveryStore, ErrorKind, NewMessage, Result};

use super::Fixture;

/// Drives one transaction of the store's own kind.
#[async_trait]
pub trait TxnHarness: Send + Sync + fmt::Debug + 'static {
    /// In one transaction: write the caller's own row `marker` (in a table or key the
    /// harness owns, beside the store's), then `enqueue_in` each message in order; commit
    /// when `commit`, otherwise roll back. An error from `enqueue_in` is returned after the
    /// transaction was rolled back (the caller's usual `?`).
    async fn write_and_enqueue(
        &self,
        marker: &str,
        messages: Vec<NewMessage>,
        commit: bool,
    ) -> Result<()>;

    /// Whether the caller's row `marker` is committed.
    async fn marker_exists(&self, marker: &str) -> Result<bool>;
}

/// A [`Fixture`] and the harness over the same store.
#[derive(Clone, Debug)]
pub struct TxnFixture {
    /// The store, its clock and its clean-up.
    pub fx: Fixture,
    /// The transactions.
    pub harness: Arc<dyn TxnHarness>,
}

async fn consumer(fx: &Fixture) -> ConsumerName {
    let name = ConsumerName::new("txn-worker").expect("a valid consumer name");
    let c = outboxkit_core::Consumer {
        name: name.clone(),
        filter: outboxkit_core::TopicFilter::all(),
        created_at: outboxkit_core::Clock::now(fx.clock().as_ref()),
        status: outboxkit_core::ConsumerStatus::Active,
    };
    fx.store().put_consumer(&c).await.expect("put_consumer");
    name
}

async fn claimable(fx: &Fixture, c: &ConsumerName) -> usize {
    let req = ClaimRequest::new(100, std::time::Duration::from_secs(30)).handler(c.clone(), 5);
    fx.store().claim(&req).await.expect("claim").len()
}

/// Committed with the caller's write: the marker and every message are there, and each
/// message's delivery is claimable.
pub async fn enqueue_in_commits_with_the_callers_write(t: TxnFixture) {
    let c = consumer(&t.fx).await;
    let messages = (0..3)
        .map(|i| NewMessage::new("order.created", serde_json::json!({ "n": i })))
        .collect();
    t.harness
        .write_and_enqueue("committed", messages, true)
        .await
        .expect("the transaction commits");
    assert!(t.harness.marker_exists("committed").await.expect("marker"));
    assert_eq!(t.fx.store().stats().await.expect("stats").total(), 3);
    assert_eq!(claimable(&t.fx, &c).await, 3);
}

/// Rolled back with the caller's write: neither the marker nor any message, delivery or
/// wake-up work is left.
pub async fn enqueue_in_rolled_back_leaves_nothing(t: TxnFixture) {
    let c = consumer(&t.fx).await;
    let messages = (0..3)
        .map(|i| NewMessage::new("order.created", serde_json::json!({ "n": i })))
        .collect();
    t.harness
        .write_and_enqueue("rolled-back", messages, false)
        .await
        .expect("the transaction rolls back cleanly");
    assert!(!t
        .harness
        .marker_exists("rolled-back")
        .await
        .expect("marker"));
    assert_eq!(t.fx.store().stats().await.expect("stats").total(), 0);
    assert_eq!(claimable(&t.fx, &c).await, 0);
}

/// An invalid message fails `enqueue_in` with `InvalidInput`; the caller's transaction then
/// rolls back and nothing of it is left, not even the valid message before it.
pub async fn enqueue_in_invalid_message_leaves_nothing(t: TxnFixture) {
    let c = consumer(&t.fx).await;
    let messages = vec![
        NewMessage::new("order.created", serde_json::json!({ "n": 1 })),
        NewMessage::new("Bad Topic", serde_json::json!({ "n": 2 })),
    ];
    let r = t.harness.write_and_enqueue("invalid", messages, true).await;
    assert_eq!(r.map_err(|e| e.kind()), Err(ErrorKind::InvalidInput));
    assert!(!t.harness.marker_exists("invalid").await.expect("marker"));
    assert_eq!(t.fx.store().stats().await.expect("stats").total(), 0);
    assert_eq!(claimable(&t.fx, &c).await, 0);
}

/// `enqueue_in` follows the event-type catalogue: in `validate` an unknown topic or a
/// payload that fails its schema is `InvalidInput` (the caller rolls back: nothing is
/// left); a valid message commits with the caller's write.
pub async fn enqueue_in_follows_the_catalogue(t: TxnFixture) {
    let c = consumer(&t.fx).await;
    let ty = outboxkit_core::NewEventType::new(
        outboxkit_core::Topic::new("order.created").expect("a topic"),
        "an order",
    )
    .schema(serde_json::json!({"type": "object", "required": ["id"]}));
    t.fx.store()
        .put_event_type(&ty)
        .await
        .expect("put_event_type");
    t.fx.store()
        .set_catalogue_mode(outboxkit_core::CatalogueMode::Validate)
        .await
        .expect("set_catalogue_mode");
    let unknown = vec![
        NewMessage::new("order.created", serde_json::json!({ "id": 1 })),
        NewMessage::new("order.unknown", serde_json::json!({ "id": 2 })),
    ];
    let r = t.harness.write_and_enqueue("unknown", unknown, true).await;
    assert_eq!(r.map_err(|e| e.field()), Err(Some("topic")));
    let failing = vec![NewMessage::new(
        "order.created",
        serde_json::json!({ "n": 1 }),
    )];
    let r = t.harness.write_and_enqueue("failing", failing, true).await;
    assert_eq!(r.map_err(|e| e.field()), Err(Some("payload")));
    assert!(!t.harness.marker_exists("unknown").await.expect("marker"));
    assert!(!t.harness.marker_exists("failing").await.expect("marker"));
    assert_eq!(t.fx.store().stats().await.expect("stats").total(), 0);
    let valid = vec![NewMessage::new(
        "order.created",
        serde_json::json!({ "id": 3 }),
    )];
    t.harness
        .write_and_enqueue("valid", valid, true)
        .await
        .expect("a valid message commits");
    assert!(t.harness.marker_exists("valid").await.expect("marker"));
    assert_eq!(claimable(&t.fx, &c).await, 1);
}

/// Run one transaction case: `setup` gives a fresh [`TxnFixture`] (or `None` when the backend
/// is unreachable and not required).
pub fn run_txn<S, SF, C, CF>(setup: S, case: C)
where
    S: FnOnce(Arc<crate::ManualClock>) -> SF,
    SF: std::future::Future<Output = Option<TxnFixture>>,
    C: FnOnce(TxnFixture) -> CF,
    CF: std::future::Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the transaction case");
    rt.block_on(async move {
        let Some(t) = setup(crate::ManualClock::new()).await else {
            return;
        };
        let fx = t.fx.clone();
        let result = tokio::spawn(case(t)).await;
        fx.cleanup().await;
        if let Err(e) = result {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
            panic!("the transaction case was cancelled: {e}");
        }
    });
}

/// Generate one test per transaction case for a store: `transaction_tests!(setup)` where
/// `setup` is an `async fn(Arc<ManualClock>) -> Option<TxnFixture>` in scope.
#[macro_export]
macro_rules! transaction_tests {
    ($setup:path) => {
        $crate::__transaction_case!(
            $setup;
            enqueue_in_commits_with_the_callers_write,
            enqueue_in_rolled_back_leaves_nothing,
            enqueue_in_invalid_message_leaves_nothing,
            enqueue_in_follows_the_catalogue,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __transaction_case {
    ($setup:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::txn::run_txn($setup, $crate::conformance::txn::$case);
            }
        )*
    };
}
