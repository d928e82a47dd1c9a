//! The reliability fault suite (RELIABILITY.md): real `outbox relay` worker
//! processes on PostgreSQL, SQLite and Redis are killed with `SIGKILL`, cut off from their
//! database, flooded with work, fed malformed input and watched for leaked secrets, and the
//! ledger is audited against what a loopback receiver saw.
//!
//! Every test is bounded (a deadline around the whole test, timeouts on every wait, loops
//! bounded in count), isolated (a random schema, key prefix or temporary file, removed
//! afterwards) and stops every child process on every path. The figures each test prints
//! (`eprintln!`, shown with `--nocapture`) are reported, never asserted.
//!
//! Scale: the defaults fit `cargo test --workspace` on 2 cores; `OUTBOX_RELIABILITY_FULL=1`
//! runs the load test at the full size (50,000 deliveries).

mod audit;
mod backend;
mod bad_input;
mod bad_input_cli;
mod crash;
mod cut;
mod faults;
mod load;
mod rate;
mod relay;
mod secrets;

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use outboxkit_core::{EntropyExt, OsEntropy};

/// Tests that run three relays at once take turns, so two of them never share the two
/// cores (which would only stretch both and prove nothing more).
static HEAVY: Mutex<()> = Mutex::new(());

/// Take the heavy-test turn (a failed test's poison is ignored).
pub fn heavy_turn() -> MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run one test's body on its own runtime, failing it when `limit` passes.
pub fn run<F: Future<Output = ()>>(name: &str, limit: Duration, body: F) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async {
        if tokio::time::timeout(limit, body).await.is_err() {
            panic!("{name} did not finish within {limit:?}");
        }
    });
}

/// The seed of a test's random choices: `OUTBOX_RELIABILITY_SEED`, or a fresh one (printed,
/// so a failure can be replayed).
pub fn seed(name: &str) -> u64 {
    let seed = std::env::var("OUTBOX_RELIABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| OsEntropy.next_u64());
    eprintln!("[{name}] seed {seed} (replay with OUTBOX_RELIABILITY_SEED={seed})");
    seed
}

/// Whether the full-size run was asked for (`OUTBOX_RELIABILITY_FULL=1`).
pub fn full() -> bool {
    std::env::var("OUTBOX_RELIABILITY_FULL").is_ok_and(|v| v == "1" || v == "true")
}

/// A unique marker for payloads and tokens (`<prefix>-<hex>`).
pub fn marker(prefix: &str) -> String {
    format!("{prefix}-{:016x}", OsEntropy.next_u64())
}
