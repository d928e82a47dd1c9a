//! The domain model: messages, destinations, deliveries, attempts.

mod attempt_detail;
mod delivery;
mod message;
mod send_at;

pub use attempt_detail::*;
pub use delivery::*;
pub use message::*;
pub use send_at::*;
