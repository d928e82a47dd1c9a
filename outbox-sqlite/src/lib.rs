//! # outbox-sqlite
//!
//! The embedded store of the outbox on SQLite through `rusqlite` (bundled): `SqliteStore`
//! will implement every store trait of `outbox-core` on one database file, with WAL, claims
//! under `BEGIN IMMEDIATE` and in-process wake-ups. This crate currently holds no code beyond
//! these docs (see issue 6).
