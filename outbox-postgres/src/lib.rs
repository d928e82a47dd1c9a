//! # outbox-postgres
//!
//! The production store of the outbox on PostgreSQL through `sqlx`: `PostgresStore` will
//! implement every store trait of `outbox-core`, ship its migrations, claim with
//! `FOR UPDATE SKIP LOCKED`, complete in batches with `unnest` and wake dispatchers with
//! LISTEN/NOTIFY. This crate currently holds no code beyond these docs (see issue 5).
