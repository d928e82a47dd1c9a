//! # outbox-redis
//!
//! The outbox store on Redis: `RedisStore` will implement every store trait of
//! `outbox-core` with atomic Lua scripts under one hash-tagged key prefix. This crate
//! currently holds no code beyond these docs (see issue 7).
