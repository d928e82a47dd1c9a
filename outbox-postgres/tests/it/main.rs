//! Integration tests of `outboxkit-postgres` against a real PostgreSQL
//! (`OUTBOX_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`). Each test
//! works in a fresh schema with a random name, dropped afterwards.

mod claims;
mod copy_enqueue;
mod enqueue;
mod faults;
mod legacy;
mod notify;
mod retention;
mod script;
mod sql_enqueue;
mod stats;
mod support;
mod tls;
mod upgrade;
mod upgrade_detail;
mod upgrade_fair;
mod upgrade_ledger;
mod upgrade_pause;
mod upgrade_v6;
