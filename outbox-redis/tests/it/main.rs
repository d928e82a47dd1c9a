//! Redis-specific integration tests: concurrency across connections, connection loss,
//! script-cache loss, `MULTI` pipelines, idempotency races, wake-ups and bounded memory.
//! Each test runs under its own random key prefix and deletes its keys afterwards.

mod common;
#[path = "../support/cluster.rs"]
mod support;

mod claim;
mod cluster;
mod config;
mod detail;
mod faults;
mod pipeline;
mod retention;
mod tls;
mod upgrade;
mod wake;
