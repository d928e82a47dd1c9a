//! # outboxkit-testing
//!
//! Everything needed to test code that uses outbox, and to prove a store correct:
//!
//! - [`ManualClock`] and [`SeededEntropy`]: deterministic time and randomness;
//! - `InMemoryStore`: a complete store for your own tests;
//! - stand-ins: `ScriptedTransport`, `WebhookReceiver` (a real loopback HTTP server),
//!   `MailStandIn`, `SmtpStandIn` (a real loopback SMTP server), and fault-injecting
//!   wrappers;
//! - `conformance`: the suite every store passes, run with `conformance_tests!`, and
//!   `strategies` (proptest): both behind the default feature `conformance`.
#![deny(missing_docs)]

pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod faults;
pub mod mail;
pub mod memory;
pub mod receiver;
pub mod smtp;
#[cfg(feature = "conformance")]
pub mod strategies;
pub mod transport;

pub use clock::{ManualClock, SeededEntropy};
// --- re-exports of memory / faults (in-memory store helper) ---
pub use faults::FaultyStore;
pub use memory::InMemoryStore;
// --- re-exports of receiver / mail / transport (stand-ins helper) ---
pub use mail::MailStandIn;
pub use receiver::{ReceivedRequest, Reply, WebhookReceiver};
pub use smtp::{SmtpMessage, SmtpReply, SmtpStage, SmtpStandIn, SmtpStandInBuilder};
pub use transport::{FaultyTransport, ScriptedTransport};

/// The workspace README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
