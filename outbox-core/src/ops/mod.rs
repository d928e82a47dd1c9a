//! The operator services: calls an operator (or the admin API, or the `outbox` command) makes,
//! written against the store traits only, so they run on any store and need no dispatcher.
//!
//! - [`Operator`]: replay, release held, retry now, reset, purge, statistics.
//! - [`EndpointAdmin`] and [`NewEndpoint`]: create and change webhook endpoints, sealing
//!   their secrets through a [`SecretVault`](crate::vault::SecretVault).
//!
//! `outboxkit_dispatch` re-exports all three under their old paths.

mod admin;
mod operator;

pub use admin::{EndpointAdmin, NewEndpoint};
pub use operator::Operator;
