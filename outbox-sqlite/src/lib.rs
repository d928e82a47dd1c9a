//! # outboxkit-sqlite
//!
//! The embedded store of the outbox on SQLite (through `rusqlite`, bundled): [`SqliteStore`]
//! implements every store trait of `outboxkit-core` on one database file — the application's
//! own file, or one of its own.
//!
//! - **Transactional enqueue.** [`SqliteStore::enqueue_in`] writes a message and its
//!   fan-out inside the caller's `rusqlite::Transaction`, so the event exists if and only if
//!   the caller's change commits. Call [`SqliteStore::notify`] after the commit to wake this
//!   process's dispatchers at once.
//! - **Claims** run in one `UPDATE … RETURNING` under `BEGIN IMMEDIATE` with fresh claim
//!   tokens, fencing, the per-key ordering barrier and discard of exhausted rows, exactly as
//!   `ARCHITECTURE.md` "The store contract in detail" says.
//! - **Off the executor.** Every SQLite call runs on the store's own threads: one writer
//!   connection and a few read-only connections (WAL lets them read while it writes).
//! - **Several processes** may share one file: writes take the lock up front and wait up to
//!   the busy timeout, then fail with `ErrorKind::Unavailable`.
//! - **Safe opening.** A file that is not a SQLite database, or is corrupt, is refused with
//!   `ErrorKind::Misconfigured` before anything is written to it.
//!
//! ```no_run
//! use outboxkit_core::{ClaimRequest, MessageStore, DeliveryStore, NewMessage};
//! use outboxkit_sqlite::SqliteStore;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::open_path("app.db").await?;
//!
//! // The application's own connection and transaction.
//! let mut conn = rusqlite::Connection::open("app.db")?;
//! conn.busy_timeout(std::time::Duration::from_secs(5))?;
//! let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
//! tx.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)", [])?;
//! tx.execute("INSERT INTO orders (id) VALUES (42)", [])?;
//! store.enqueue_in(&tx, NewMessage::new("order.created", serde_json::json!({"id": 42})))?;
//! tx.commit()?;
//! store.notify();
//!
//! // Or in a transaction of the store's own.
//! store.enqueue(NewMessage::new("order.shipped", serde_json::json!({"id": 42}))).await?;
//! # Ok(()) }
//! ```
//!
//! Schema: tables prefixed `outbox_`, created or migrated on open and versioned in
//! `outbox_schema_version`; times are INTEGER milliseconds of the injected clock, ids are
//! lowercase hyphenated UUID text, and each delivery carries an `AUTOINCREMENT` sequence.
#![deny(missing_docs)]

mod admin;
mod claim;
mod config;
mod conn;
mod enqueue;
mod error;
mod ledger;
mod rows;
mod sql;
mod store;
mod tenancy;
mod tokens;
mod wake;

pub use config::{SqliteConfig, Synchronous};
pub use conn::{migration_script, migrations, Migration};
/// The driver this store is built on (`enqueue_in` takes a `rusqlite::Transaction`), re-exported so callers use the same
/// version.
pub use rusqlite;
pub use store::SqliteStore;

/// The schema version this crate writes (recorded in `outbox_schema_version`).
pub const SCHEMA_VERSION: i64 = conn::SCHEMA_VERSION;

/// The versions of every schema migration this crate ships, oldest first (each is recorded
/// in `outbox_schema_version` once applied).
pub const MIGRATION_VERSIONS: &[i64] = conn::MIGRATION_VERSIONS;
