#![doc = include_str!("../README.md")]

pub mod config;
mod error;
pub mod mailer;

pub use config::{SmtpAuth, SmtpConfig, SmtpSecurity};
pub use mailer::SmtpMailer;
