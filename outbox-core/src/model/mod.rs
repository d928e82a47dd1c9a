//! The domain model of DESIGN §3: messages, destinations, deliveries, attempts.

mod delivery;
mod message;

pub use delivery::*;
pub use message::*;
