#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod claim;
mod config;
mod console;
mod deliveries;
mod endpoints;
mod enqueue;
mod entry;
mod error;
mod event_types;
mod ledger;
mod rows;
mod scripts;
mod store;
mod tenancy;
mod tokens;
mod wake;

pub use config::RedisConfig;
/// The driver this store is built on (`enqueue_in` takes a `redis::Pipeline`), re-exported so callers use the same
/// version.
pub use redis;
pub use rows::EnqueueReply;
pub use store::{RedisConnection, RedisStore};
