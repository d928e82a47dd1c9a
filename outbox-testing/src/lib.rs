#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod faults;
pub mod fixtures;
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
pub use fixtures::sample_endpoint;
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
