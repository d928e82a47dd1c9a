#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod claim;
mod config;
mod console;
mod copy;
mod deliveries;
mod endpoints;
mod enqueue;
pub mod error;
mod event_types;
mod hot;
mod ledger;
mod permits;
mod rows;
mod schema;
mod sql;
mod store;
mod tenancy;
mod tokens;
mod wake;

pub use config::PostgresConfig;
pub use schema::{enqueue_function_sql, migration_script, migrations, Migration};
pub use store::PostgresStore;

/// The `sqlx` this crate is built on, for the pool and transaction types in its API.
pub use sqlx;
