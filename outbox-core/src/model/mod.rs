//! The domain model: messages, destinations, deliveries, attempts.

mod delivery;
mod message;

pub use delivery::*;
pub use message::*;
