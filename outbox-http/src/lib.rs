//! # outboxkit-http
//!
//! The webhook transport ([`HttpTransport`]) and an HTTP mail-API mailer ([`HttpMailer`])
//! of the outbox on `reqwest` with rustls (no OpenSSL), and the [`EgressPolicy`] that keeps
//! webhooks off private networks.
//!
//! A webhook transport with the safe default policy (`https` only, public addresses only):
//!
//! ```no_run
//! use std::time::Duration;
//! use outboxkit_core::{EndpointUrl, SignedRequest, WebhookTransport};
//! use outboxkit_http::{EgressPolicy, HttpTransport};
//!
//! # async fn demo() -> outboxkit_core::Result<()> {
//! let transport = HttpTransport::new(EgressPolicy::default())?;
//! let answer = transport
//!     .send(SignedRequest {
//!         url: EndpointUrl::parse("https://hooks.example.com/outbox")?,
//!         headers: vec![], // the dispatcher adds the webhook-id/-timestamp/-signature headers
//!         body: br#"{"type":"order.created"}"#.to_vec(),
//!         timeout: Duration::from_secs(10),
//!     })
//!     .await;
//! println!("{:?}", answer.outcome());
//! # Ok(()) }
//! ```
//!
//! A local receiver needs an explicit allow-list: `EgressPolicy::default().allow_http(true)
//! .allow_cidr("127.0.0.0/8")?`.
//!
//! A mailer for a JSON mail API:
//!
//! ```no_run
//! use outboxkit_http::{HttpMailer, HttpMailerConfig};
//!
//! let mailer = HttpMailer::new(HttpMailerConfig {
//!     url: "https://mail.example.com/v1/send".into(),
//!     api_key: "key".into(),
//!     idempotent: true,
//!     ..HttpMailerConfig::default()
//! })?;
//! # Ok::<(), outboxkit_core::Error>(())
//! ```
#![deny(missing_docs)]

pub mod config;
pub mod egress;
mod error;
pub mod mailer;
pub mod transport;

pub use config::{HttpMailerConfig, HttpTransportConfig};
pub use egress::{AddressKind, EgressError, EgressPolicy, EgressRefusal, PolicyResolver};
pub use mailer::HttpMailer;
pub use transport::HttpTransport;
