//! `InMemoryStore`: every store trait with exactly the semantics of the store contract (`docs/decisions.md`, "The store contract in detail"), for
//! users' tests and as the reference implementation of the conformance suite.
//!
//! All state sits behind one `std::sync::Mutex`, taken for the length of one call and never
//! across an `.await`, so every call is atomic and concurrent tasks see a consistent store.
//! Time comes from the injected [`Clock`], randomness (ids, claim tokens) from the injected
//! [`Entropy`].
//!
//! ```
//! use outboxkit_core::{MessageStore, NewMessage};
//! use outboxkit_testing::{InMemoryStore, ManualClock};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = InMemoryStore::new(ManualClock::new());
//! let e = store.enqueue(NewMessage::new("order.created", serde_json::json!({"id": 1}))).await?;
//! assert_eq!(e.deliveries, 0); // no consumer or endpoint yet: recorded, nothing to deliver
//! assert_eq!(store.message_count(), 1);
//! # Ok::<(), outboxkit_core::Error>(()) }).unwrap();
//! ```

// One file per store trait, as in every store: `store.rs` (`DeliveryStore`), `deliveries.rs`
// (`OperatorStore`), `enqueue.rs` (`MessageStore`), `endpoints.rs` (`EndpointStore`),
// `ledger.rs` (`Ledger`), `tokens.rs` (`TokenStore`), `event_types.rs` (`EventTypeStore`), `console.rs` (`ConsoleStore`); the claim protocol in `claim.rs`, the
// data and its enqueue in `state.rs`. Each file holds the `State` operations its trait calls.
mod claim;
mod console;
mod deliveries;
mod endpoints;
mod enqueue;
mod event_types;
mod ledger;
mod state;
mod store;
mod tokens;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use outboxkit_core::{Clock, Entropy, Limits, OsEntropy, Timestamp, Wakeups};

use state::State;

/// A complete store in memory. `Clone` gives a second handle to the same data.
#[derive(Clone)]
pub struct InMemoryStore {
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    limits: Limits,
}

struct Shared {
    state: Mutex<State>,
    wakeups: Wakeups,
    /// Admin API tokens, apart from the delivery state (`tokens.rs`).
    tokens: Mutex<tokens::Tokens>,
    /// The event-type catalogue (`event_types.rs`).
    types: Mutex<event_types::Types>,
    /// The audit log and console sessions (`console.rs`).
    console: Mutex<console::Console>,
}

impl InMemoryStore {
    /// An empty store reading time from `clock`, with OS randomness and default limits.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        InMemoryStore {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                wakeups: Wakeups::new(),
                tokens: Mutex::default(),
                types: Mutex::default(),
                console: Mutex::default(),
            }),
            clock,
            entropy: Arc::new(OsEntropy),
            limits: Limits::default(),
        }
    }

    /// Use `entropy` for ids and claim tokens (e.g. a `SeededEntropy` for reproducible runs).
    pub fn with_entropy(mut self, entropy: Arc<dyn Entropy>) -> Self {
        self.entropy = entropy;
        self
    }

    /// Validate enqueues against `limits` instead of the defaults.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How many messages are stored (every tenant).
    pub fn message_count(&self) -> usize {
        self.lock().messages.len()
    }

    /// How many deliveries are stored (every tenant).
    pub fn delivery_count(&self) -> usize {
        self.lock().rows.len()
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied change behind: every
        // call validates first and then writes, so recover the data.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self) {
        self.shared.wakeups.wake();
    }
}

impl fmt::Debug for InMemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock();
        f.debug_struct("InMemoryStore")
            .field("messages", &s.messages.len())
            .field("deliveries", &s.rows.len())
            .field("endpoints", &s.endpoints.len())
            .field("consumers", &s.consumers.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use outboxkit_core::{ErrorKind, MessageStore, NewMessage};

    /// More claim groups than the batch (every e-mail recipient is one): each claim takes
    /// the groups whose oldest claimable row comes first, one row each.
    #[tokio::test]
    async fn many_groups_are_claimed_in_the_order_of_their_oldest_row() {
        use outboxkit_core::{ClaimRequest, DeliveryStore};
        let store = InMemoryStore::new(ManualClock::new());
        let mut ids = Vec::new();
        for to in ["r0", "r1", "r2", "r3", "r0", "r4"] {
            let m = NewMessage::raw("a.b", br#"{"subject":"s","text":"t"}"#.to_vec())
                .email(format!("{to}@example.com"));
            ids.push(store.enqueue(m).await.unwrap().message_id);
        }
        let req = ClaimRequest::new(3, std::time::Duration::from_secs(30)).email(5);
        let claimed = |got: Vec<outboxkit_core::Claimed>| -> Vec<_> {
            got.iter().map(|c| c.message.id).collect()
        };
        let first = claimed(store.claim(&req).await.unwrap());
        assert_eq!(first, ids[..3], "r0, r1, r2: one each, oldest first");
        let second = claimed(store.claim(&req).await.unwrap());
        assert_eq!(
            second,
            ids[3..],
            "then r3, r0's second (now its oldest claimable), r4"
        );
        assert!(store.claim(&req).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn clones_share_data_and_limits_apply() {
        let limits = Limits {
            max_payload_bytes: 8,
            ..Limits::default()
        };
        let a = InMemoryStore::new(ManualClock::new()).with_limits(limits);
        let b = a.clone();
        let e = b
            .enqueue(NewMessage::raw("a.b", b"12345678".to_vec()))
            .await
            .unwrap();
        assert!(!e.duplicate);
        assert_eq!(a.message_count(), 1);
        let too_big = a
            .enqueue(NewMessage::raw("a.b", b"123456789".to_vec()))
            .await;
        assert_eq!(too_big.unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(b.message_count(), 1);
        let debug = format!("{a:?}");
        assert!(
            debug.contains("messages: 1") && !debug.contains("12345678"),
            "{debug}"
        );
    }

    #[tokio::test]
    async fn seeded_entropy_makes_ids_reproducible() {
        let run = || async {
            let clock = ManualClock::new();
            let s = InMemoryStore::new(clock).with_entropy(crate::SeededEntropy::new(3));
            s.enqueue(NewMessage::raw("a.b", b"x".to_vec()))
                .await
                .unwrap()
                .message_id
        };
        assert_eq!(run().await, run().await);
    }
}
