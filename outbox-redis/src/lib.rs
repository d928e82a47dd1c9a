//! # outboxkit-redis
//!
//! The outbox store on Redis: [`RedisStore`] implements every store trait of
//! [`outboxkit_core`] (`DeliveryStore`, `MessageStore`, `EndpointStore`, `Ledger`) with the
//! semantics of the store contract, on the [`redis`] crate (async, one multiplexed
//! connection through a reconnecting `ConnectionManager`). It needs Redis 7.0 or later.
//!
//! ```no_run
//! use outboxkit_core::{ClaimRequest, MessageStore, DeliveryStore, NewMessage};
//! use outboxkit_redis::RedisStore;
//!
//! # async fn demo() -> outboxkit_core::Result<()> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
//! store.enqueue(NewMessage::new("order.created", serde_json::json!({"id": 42}))).await?;
//! let claimed = store
//!     .claim(&ClaimRequest::new(100, std::time::Duration::from_secs(40)).webhooks(6))
//!     .await?;
//! # let _ = claimed;
//! # Ok(()) }
//! ```
//!
//! ## Atomicity and cluster safety
//!
//! Every operation that touches more than one key is one Lua script (`src/scripts/`), so it
//! is atomic. Scripts are loaded once and called by SHA; after a Redis restart or a
//! `SCRIPT FLUSH` the `NOSCRIPT` reply makes the client load them again. Every key lives
//! under [`RedisConfig::prefix`], which must contain a hash tag (`{outbox}` by default):
//! the prefix is each script's only declared key, and every key a script touches is built
//! from it, so all of them hash to the prefix's slot and one outbox lives in one Redis
//! Cluster slot.
//!
//! Time is the injected [`outboxkit_core::Clock`]'s (passed to every script in milliseconds;
//! Redis `TIME` is never used), and ids and claim tokens come from the injected
//! [`outboxkit_core::Entropy`].
//!
//! ## Keys (after `<prefix>:`)
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `d:<id>` | hash | a delivery, packed into a few fields (layout in `scripts/common.lua`) |
//! | `m:<id>` | hash | a message: payload, packed fields, deliveries left |
//! | `a:<delivery>` | list | its ledger, capped at [`RedisConfig::attempts_cap`] entries (older ones dropped; numbers kept) |
//! | `q:h:<consumer>`, `q:w`, `q:e` | zset | unfinished deliveries per source by `next_attempt_at`; a claimed row's is its lease end, so an expired lease is simply due |
//! | `x:h:<consumer>`, `x:w`, `x:e` | zset | deliveries that may be exhausted, by attempts (finds the rows a claim kills without scanning) |
//! | `o:<tenant, destination, ordering key>` | zset | unfinished deliveries of one key, by sequence (the FIFO barrier) |
//! | `td:<tenant>` / `tf:<tenant>` / `tm:<tenant>` | zset | a tenant's deliveries by creation / finished ones by completion / messages left without deliveries |
//! | `i:<tenant, topic, key>` | string | an idempotency key → message id (deleted with the message) |
//! | `e:<id>`, `te:<tenant>`, `h:<endpoint>` | hash, zset, set | endpoints, a tenant's endpoints by creation, an endpoint's held deliveries |
//! | `consumers`, `stats`, `seq`, `qs`, `pt`, `purge` | misc | consumers, per-status counters, the sequence, the due-set registry, tenants with something to purge, the retention rotation |
//!
//! Finished deliveries leave the due sets; retention ([`outboxkit_core::Ledger::purge_completed`])
//! deletes them, their ledgers, emptied messages and their idempotency keys, so nothing grows
//! without bound.
//!
//! ## Wake-ups
//!
//! Scripts `PUBLISH` on `<prefix>:wake` when work may have arrived. The first
//! [`outboxkit_core::DeliveryStore::wake_listener`] call starts a background task holding a
//! pub/sub connection that turns those messages into wake-ups, reconnecting with backoff
//! and waking once after each reconnect.
//!
//! ## Durability
//!
//! Redis keeps the outbox in memory. Without AOF a restart loses it; with
//! `appendfsync everysec` up to about one second of writes; with `appendfsync always`, none.
//! See the crate's `README.md`.
#![deny(missing_docs)]

mod codec;
mod config;
mod delivery;
mod endpoints;
mod error;
mod ledger;
mod scripts;
mod store;
mod tokens;
mod wake;

pub use codec::EnqueueReply;
pub use config::RedisConfig;
/// The driver this store is built on (`enqueue_in` takes a `redis::Pipeline`), re-exported so callers use the same
/// version.
pub use redis;
pub use store::RedisStore;
