#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod address;
pub mod config;
mod detail;
pub mod egress;
mod error;
mod mail_detail;
pub mod mailer;
mod timing;
pub mod tls;
pub mod transport;

pub use config::{HttpMailerConfig, HttpTransportConfig};
pub use egress::{
    AddressKind, EgressError, EgressPolicy, EgressRefusal, PolicyResolver, METADATA_ADDRESSES,
};
pub use mailer::HttpMailer;
pub use tls::{client_builder, tls_config};
pub use transport::HttpTransport;
