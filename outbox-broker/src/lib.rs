#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[cfg(feature = "amqp")]
mod amqp;
mod config;
#[cfg(feature = "nats")]
mod nats;

#[cfg(feature = "amqp")]
pub use amqp::AmqpTransport;
pub use config::{connect, BrokerUrl};
#[cfg(feature = "nats")]
pub use nats::NatsTransport;
pub use outboxkit_core::broker::{
    BrokerFailure, BrokerMessage, BrokerResponse, BrokerTransport, DynBrokerTransport,
    SubjectTemplate,
};
