//! The conformance suite: the contract every store must meet.
//!
//! One `pub async fn` per behaviour in [`cases`], each taking a [`Fixture`]: a fresh,
//! isolated store driven by a [`ManualClock`]. An adapter runs the whole suite with one
//! line in `tests/conformance.rs`:
//!
//! ```
//! use std::sync::Arc;
//! use outboxkit_testing::{conformance::Fixture, InMemoryStore, ManualClock};
//!
//! // Your store here: a fresh, isolated one per call (new schema, temp file, key prefix).
//! async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
//!     let store = InMemoryStore::new(clock.clone());
//!     Some(Fixture::new(Arc::new(store), clock))
//! }
//!
//! outboxkit_testing::conformance_tests!(setup);
//! # fn main() {}
//! ```
//!
//! A store that also keeps the admin API's tokens ([`TokenStore`]) runs the token cases too,
//! from a setup whose fixture has them:
//!
//! ```
//! use std::sync::Arc;
//! use outboxkit_testing::{conformance::Fixture, InMemoryStore, ManualClock};
//!
//! async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
//!     let store = InMemoryStore::new(clock.clone());
//!     Some(Fixture::new(Arc::new(store.clone()), clock).with_tokens(Arc::new(store)))
//! }
//!
//! outboxkit_testing::conformance_tests!(setup);
//! outboxkit_testing::token_conformance_tests!(setup);
//! # fn main() {}
//! ```
//!
//! When a backend is unreachable, `setup` calls [`backend_unavailable`], which fails the test
//! under `OUTBOX_TEST_REQUIRE_BACKENDS=1` and otherwise says so loudly and returns `None`.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use outboxkit_core::tokens::TokenStore;
use outboxkit_core::{ConsoleStore, Store};

use crate::clock::ManualClock;

pub mod cases;
pub mod model;
pub mod txn;

type Reopen = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn Store>> + Send>> + Send + Sync>;
type Cleanup = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Inner {
    store: Arc<dyn Store>,
    tokens: Option<Arc<dyn TokenStore>>,
    console: Option<Arc<dyn ConsoleStore>>,
    clock: Arc<ManualClock>,
    reopen: Option<Reopen>,
    cleanup: Mutex<Option<Cleanup>>,
    keys_split_shards: bool,
}

/// A fresh, isolated store for one case, with its clock.
#[derive(Clone)]
pub struct Fixture(Arc<Inner>);

impl std::fmt::Debug for Fixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fixture")
            .field("store", &self.0.store)
            .finish_non_exhaustive()
    }
}

impl Fixture {
    /// A fixture over `store`, which must read time from `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<ManualClock>) -> Self {
        Fixture(Arc::new(Inner {
            store,
            tokens: None,
            console: None,
            clock,
            reopen: None,
            cleanup: Mutex::new(None),
            keys_split_shards: false,
        }))
    }

    /// The store spreads messages of different ordering keys over shards that are claimed
    /// apart (Redis Cluster with several shards): a strict-FIFO endpoint is then ordered per
    /// shard only, and the FIFO cases send it messages without keys (all on the tenant's
    /// shard), the limit such a store documents.
    pub fn with_keys_split_over_shards(self) -> Self {
        let inner = Arc::try_unwrap(self.0)
            .unwrap_or_else(|_| panic!("configure a fixture before cloning it"));
        Fixture(Arc::new(Inner {
            keys_split_shards: true,
            ..inner
        }))
    }

    /// Whether [`Fixture::with_keys_split_over_shards`] was called.
    pub fn keys_split_over_shards(&self) -> bool {
        self.0.keys_split_shards
    }

    /// How to open a second, independent handle (its own connections) to the same data.
    /// Without it, [`Fixture::second_handle`] returns the same handle.
    pub fn with_reopen<F, Fut>(self, reopen: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Arc<dyn Store>> + Send + 'static,
    {
        let inner = Arc::try_unwrap(self.0)
            .unwrap_or_else(|_| panic!("configure a fixture before cloning it"));
        Fixture(Arc::new(Inner {
            reopen: Some(Arc::new(move || Box::pin(reopen()))),
            ..inner
        }))
    }

    /// The store's admin API tokens ([`TokenStore`]), usually the same handle as the store.
    /// Only the token cases ([`crate::token_conformance_tests!`]) read it: a fixture without
    /// it fails them, and passes every other case.
    pub fn with_tokens(self, tokens: Arc<dyn TokenStore>) -> Self {
        let inner = Arc::try_unwrap(self.0)
            .unwrap_or_else(|_| panic!("configure a fixture before cloning it"));
        Fixture(Arc::new(Inner {
            tokens: Some(tokens),
            ..inner
        }))
    }

    /// The token store under test; panics when the fixture was built without
    /// [`Fixture::with_tokens`].
    pub fn tokens(&self) -> &Arc<dyn TokenStore> {
        self.0
            .tokens
            .as_ref()
            .expect("the fixture has no token store: call Fixture::with_tokens in setup")
    }

    /// The store's audit log, sessions and activity ([`ConsoleStore`]), usually the same
    /// handle as the store. Only the console cases ([`crate::console_conformance_tests!`])
    /// read it.
    pub fn with_console(self, console: Arc<dyn ConsoleStore>) -> Self {
        let inner = Arc::try_unwrap(self.0)
            .unwrap_or_else(|_| panic!("configure a fixture before cloning it"));
        Fixture(Arc::new(Inner {
            console: Some(console),
            ..inner
        }))
    }

    /// The console store under test; panics when the fixture was built without
    /// [`Fixture::with_console`].
    pub fn console(&self) -> &Arc<dyn ConsoleStore> {
        self.0
            .console
            .as_ref()
            .expect("the fixture has no console store: call Fixture::with_console in setup")
    }

    /// Work to run after the case, pass or fail (drop the schema, delete the keys).
    pub fn with_cleanup(self, cleanup: impl Future<Output = ()> + Send + 'static) -> Self {
        *self.0.cleanup.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::pin(cleanup));
        self
    }

    /// The store under test.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.0.store
    }

    /// Its clock.
    pub fn clock(&self) -> &Arc<ManualClock> {
        &self.0.clock
    }

    /// A second handle to the same data (independent connections where the backend has
    /// them).
    pub async fn second_handle(&self) -> Arc<dyn Store> {
        match &self.0.reopen {
            Some(r) => r().await,
            None => self.0.store.clone(),
        }
    }

    async fn cleanup(&self) {
        let c = self
            .0
            .cleanup
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(c) = c {
            c.await;
        }
    }
}

/// Whether `OUTBOX_TEST_REQUIRE_BACKENDS=1` is set (CI): an unreachable backend fails.
pub fn require_backends() -> bool {
    std::env::var("OUTBOX_TEST_REQUIRE_BACKENDS").is_ok_and(|v| v == "1" || v == "true")
}

/// Report an unreachable backend: panics under `OUTBOX_TEST_REQUIRE_BACKENDS=1`, otherwise
/// prints a loud warning and returns `None` so the case passes locally.
pub fn backend_unavailable<T>(backend: &str, why: impl std::fmt::Display) -> Option<T> {
    if require_backends() {
        panic!("{backend} is required (OUTBOX_TEST_REQUIRE_BACKENDS=1) but unreachable: {why}");
    }
    eprintln!("\n*** SKIPPING: {backend} is unreachable ({why}); set OUTBOX_TEST_REQUIRE_BACKENDS=1 to fail instead ***\n");
    None
}

/// Run one case: build a runtime, set up a fixture, run the case, clean up (even when the
/// case panics), then re-raise the case's panic. Used by [`crate::conformance_tests!`].
pub fn run<S, SF, C, CF>(setup: S, case: C)
where
    S: FnOnce(Arc<ManualClock>) -> SF,
    SF: Future<Output = Option<Fixture>>,
    C: FnOnce(Fixture) -> CF,
    CF: Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime for the conformance case");
    rt.block_on(async move {
        let Some(fx) = setup(ManualClock::new()).await else {
            return;
        };
        let result = AssertUnwindSafe(tokio::spawn(case(fx.clone()))).await;
        fx.cleanup().await;
        if let Err(e) = result {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
            panic!("the conformance case was cancelled: {e}");
        }
    });
}

/// Generate one test per conformance case for a store: `conformance_tests!(setup)` where
/// `setup` is an `async fn(Arc<ManualClock>) -> Option<Fixture>` in scope. It needs only the
/// [`Store`] traits: the admin API's token cases are [`crate::token_conformance_tests!`].
#[macro_export]
macro_rules! conformance_tests {
    ($setup:path) => {
        $crate::__conformance_cases!($setup);

        #[test]
        fn follows_the_model() {
            $crate::conformance::model::check_model(
                $setup,
                $crate::conformance::model::model_cases(),
            );
        }
    };
}

/// Generate one test per token case ([`TokenStore`], the admin API's tokens) for a store
/// that has one: `token_conformance_tests!(setup)`, with `setup` as for
/// [`crate::conformance_tests!`] returning a fixture built with [`Fixture::with_tokens`].
/// Call both macros (in one module they need no second setup) so the store runs every case.
#[macro_export]
macro_rules! token_conformance_tests {
    ($setup:path) => {
        $crate::__token_conformance_cases!($setup);
    };
}

/// Generate one test per console case ([`ConsoleStore`]: audit log, sessions, activity):
/// `console_conformance_tests!(setup)`, with a fixture built with [`Fixture::with_console`].
#[macro_export]
macro_rules! console_conformance_tests {
    ($setup:path) => {
        $crate::__console_conformance_cases!($setup);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case {
    ($setup:path; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run($setup, $crate::conformance::cases::$case);
            }
        )*
    };
}
