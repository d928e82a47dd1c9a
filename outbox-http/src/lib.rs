//! # outbox-http
//!
//! The webhook transport (`HttpTransport`) and an HTTP mail-API mailer (`HttpMailer`) of the
//! outbox on `reqwest` with rustls, and the egress policy that keeps webhooks off private
//! networks. This crate currently holds no code beyond these docs (see issue 8).
