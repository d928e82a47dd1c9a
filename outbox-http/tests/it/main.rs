//! outboxkit-http against loopback stand-ins only: no traffic leaves the machine.

mod detail;
mod egress;
mod mailer;
mod support;
mod transport;
