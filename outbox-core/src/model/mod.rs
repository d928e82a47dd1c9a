//! The domain model: messages, destinations, deliveries, attempts.

mod delivery;
mod message;
mod send_at;

pub use delivery::*;
pub use message::*;
pub use send_at::*;
