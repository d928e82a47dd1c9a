#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[cfg(feature = "amqp")]
mod amqp;
mod config;
#[cfg(feature = "nats")]
mod nats;

#[cfg(feature = "amqp")]
pub use amqp::AmqpTransport;
pub use config::{connect, start, Broker, BrokerUrl};
#[cfg(feature = "nats")]
pub use nats::NatsTransport;
pub use outboxkit_core::broker::{
    BrokerFailure, BrokerMessage, BrokerResponse, BrokerTransport, DynBrokerTransport,
    SubjectTemplate,
};

/// The async-nats version this crate is built on (to create streams and read them with
/// the same client).
#[cfg(feature = "nats")]
pub use async_nats;
/// The lapin version this crate is built on (to declare exchanges and queues with the same
/// client).
#[cfg(feature = "amqp")]
pub use lapin;
