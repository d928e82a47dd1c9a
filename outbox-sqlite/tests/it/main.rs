//! Integration tests of `SqliteStore` beyond the conformance suite: transactions through
//! `enqueue_in`, bulk enqueue, several processes on one file, crashes, bad files and locks.

mod bulk;
mod busy;
mod common;
mod dispatch;
mod fairness;
mod fences;
mod files;
mod folded;
mod processes;
mod script;
mod transactions;
mod upgrade;
mod upgrade_claim;
mod upgrade_detail;
mod upgrade_fifo;
mod upgrade_groups;
mod upgrade_headers;
mod upgrade_lean;
mod upgrade_ledger;
mod upgrade_pause;
