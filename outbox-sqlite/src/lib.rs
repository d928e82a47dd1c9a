#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[macro_use]
mod rows;
mod claim;
mod config;
mod conn;
mod console;
mod deliveries;
mod endpoints;
mod enqueue;
mod error;
mod event_types;
mod groups;
mod ledger;
mod permits;
mod routes;
mod schema;
mod store;
mod tenancy;
mod tokens;
mod wake;

pub use config::{SqliteConfig, Synchronous};
/// The driver this store is built on (`enqueue_in` takes a `rusqlite::Transaction`), re-exported so callers use the same
/// version.
pub use rusqlite;
pub use schema::{migration_script, migrations, Migration};
pub use store::SqliteStore;

/// The schema version this crate writes (recorded in `outbox_schema_version`).
pub const SCHEMA_VERSION: i64 = schema::SCHEMA_VERSION;

/// The versions of every schema migration this crate ships, oldest first (each is recorded
/// in `outbox_schema_version` once applied).
pub const MIGRATION_VERSIONS: &[i64] = schema::MIGRATION_VERSIONS;
