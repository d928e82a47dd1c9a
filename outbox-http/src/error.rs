//! Error mapping: hyper-util / hyper / io failures to webhook error classes and mail errors,
//! and this crate's configuration errors to `outboxkit_core::Error`.

use std::error::Error as StdError;
use std::io;

use outboxkit_core::{ErrorClass, MailError, MailErrorCode, MailOutcome};

use crate::address::EgressError;

/// This crate's own failures, mapped to [`outboxkit_core::ErrorKind`] by `From`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// A setting is out of range.
    #[error("{message}")]
    Setting {
        field: &'static str,
        message: &'static str,
    },
    /// An allow-list entry is not a CIDR or an address.
    #[error("not a cidr or an ip address")]
    InvalidCidr,
}

impl From<HttpError> for outboxkit_core::Error {
    fn from(e: HttpError) -> Self {
        match e {
            HttpError::Setting { field, message } => {
                outboxkit_core::Error::misconfigured(field, message)
            }
            HttpError::InvalidCidr => {
                outboxkit_core::Error::invalid_input("cidr", "must be a cidr or an ip address")
            }
        }
    }
}

/// What the chain of causes says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The egress policy refused the address (the kind's name).
    Refused(&'static str),
    /// The name did not resolve.
    NotFound,
    /// The connection was refused.
    ConnectionRefused,
    /// The connection was reset or closed early.
    ConnectionReset,
    /// A deadline passed.
    TimedOut,
    /// TLS failed.
    Tls,
    /// The peer broke the HTTP protocol or closed before answering.
    Protocol,
    /// Anything else.
    Other,
}

/// Walk `err`'s chain of causes (looking inside `io::Error`s too) for the first one we know.
pub(crate) fn cause(err: &(dyn StdError + 'static)) -> Cause {
    let mut next: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(c) = known(e) {
            return c;
        }
        if let Some(inner) = e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            // `io::Error::source` skips the wrapped error; continue from the wrapped error
            // itself, which can be another `io::Error` (reqwest 0.13's connector wraps the
            // TLS stream's `InvalidData` error in one of kind `Other`).
            next = Some(inner);
            continue;
        }
        next = e.source();
    }
    Cause::Other
}

fn known(e: &(dyn StdError + 'static)) -> Option<Cause> {
    if let Some(egress) = e.downcast_ref::<EgressError>() {
        return Some(match egress {
            EgressError::Refused(crate::EgressRefusal::Address(kind)) => {
                Cause::Refused(kind.as_str())
            }
            EgressError::Refused(_) => Cause::Refused("scheme"),
            EgressError::NotFound => Cause::NotFound,
        });
    }
    if e.downcast_ref::<rustls::Error>().is_some() {
        return Some(Cause::Tls);
    }
    if let Some(h) = e.downcast_ref::<hyper::Error>() {
        if h.is_timeout() {
            return Some(Cause::TimedOut);
        }
        if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
            return Some(Cause::ConnectionReset);
        }
        if h.is_parse() {
            return Some(Cause::Protocol);
        }
    }
    if let Some(io) = e.downcast_ref::<io::Error>() {
        return match io.kind() {
            io::ErrorKind::ConnectionRefused => Some(Cause::ConnectionRefused),
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof => Some(Cause::ConnectionReset),
            io::ErrorKind::TimedOut => Some(Cause::TimedOut),
            _ => None,
        };
    }
    None
}

/// A webhook send that got no answer: its class and a short detail (no address, no URL).
/// (hyper-util's client follows no redirect and has no deadline of its own: the transport
/// applies one around the whole exchange.)
pub(crate) fn webhook_failure(err: &hyper_util::client::legacy::Error) -> (ErrorClass, String) {
    match cause(err) {
        Cause::Refused(kind) => (
            ErrorClass::EgressRefused,
            format!("the egress policy refuses {kind} addresses"),
        ),
        Cause::NotFound => (ErrorClass::Dns, "the host name did not resolve".into()),
        Cause::ConnectionRefused => (ErrorClass::Network, "connection refused".into()),
        Cause::ConnectionReset => (
            ErrorClass::Network,
            "the connection closed before an answer".into(),
        ),
        Cause::TimedOut => (ErrorClass::Timeout, "the deadline passed".into()),
        Cause::Tls => (ErrorClass::Network, "tls handshake failed".into()),
        Cause::Protocol => (ErrorClass::Network, "the answer was not valid http".into()),
        Cause::Other if err.is_connect() => (ErrorClass::Network, "could not connect".into()),
        Cause::Other => (ErrorClass::Network, "the request failed".into()),
    }
}

/// A mail send that got no answer. Before the request could have left (no connection):
/// certainly not sent; after: maybe sent.
/// (hyper-util's client has no deadline of its own: the mailer applies one around the
/// whole exchange, and its passing is `timeout`, maybe sent.)
pub(crate) fn mail_failure(err: &hyper_util::client::legacy::Error) -> MailError {
    let cause = cause(err);
    let connect = err.is_connect()
        || matches!(
            cause,
            Cause::ConnectionRefused | Cause::NotFound | Cause::Tls
        );
    if cause == Cause::TimedOut {
        let outcome = if connect {
            MailOutcome::NotSent
        } else {
            MailOutcome::Unknown
        };
        return MailError::new(
            MailErrorCode::Timeout,
            outcome,
            "the mail service did not answer in time",
        );
    }
    if connect {
        let detail = match cause {
            Cause::ConnectionRefused => "the mail service refused the connection",
            Cause::NotFound => "the mail service's host name did not resolve",
            Cause::Tls => "tls handshake with the mail service failed",
            _ => "could not connect to the mail service",
        };
        return MailError::new(MailErrorCode::Unavailable, MailOutcome::NotSent, detail);
    }
    MailError::new(
        MailErrorCode::Unavailable,
        MailOutcome::Unknown,
        "the connection to the mail service failed after sending",
    )
}
