#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod delivery;
mod endpoints;
pub mod error;
mod ledger;
mod listen;
mod notify;
mod rows;
mod sql;
mod store;
mod tenancy;
mod tokens;

pub use config::PostgresConfig;
pub use store::{migration_script, migrations, Migration, PostgresStore};

/// The `sqlx` this crate is built on, for the pool and transaction types in its API.
pub use sqlx;
