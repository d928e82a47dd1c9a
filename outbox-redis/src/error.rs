//! Mapping `redis` errors and script replies to [`outboxkit_core::Error`].
//!
//! - I/O failures (refused, reset, dropped, timed out), `TRYAGAIN`, `CLUSTERDOWN`,
//!   `LOADING`, `MASTERDOWN`, `READONLY` (a failover in progress) and `OOM` →
//!   `Unavailable`: retryable.
//! - Script replies carrying a marker (`OUTBOX_NOT_FOUND`, `OUTBOX_CONFLICT`,
//!   `OUTBOX_LEASE_LOST`) → the matching kind.
//! - Authentication and configuration failures (`NOAUTH`, `NOPERM`, `CROSSSLOT`, a bad
//!   client configuration) → `Misconfigured`.
//! - Everything else (wrong types, unreadable replies, unknown codes) → `Unexpected`.

use outboxkit_core::{Error, ErrorKind};
use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind as Server};

/// What went wrong below the store's API, before it becomes an [`outboxkit_core::Error`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The driver or the server failed.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// A stored value could not be read back.
    #[error("a stored {0} could not be decoded")]
    Corrupt(&'static str),
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Redis(r) => map_redis(r),
            StoreError::Corrupt(what) => {
                Error::new(ErrorKind::Unexpected, format!("a stored {what} is corrupt"))
                    .with_source(StoreError::Corrupt(what))
            }
        }
    }
}

/// The error for a stored value that cannot be decoded.
pub(crate) fn corrupt(what: &'static str) -> Error {
    StoreError::Corrupt(what).into()
}

/// Shorthand for `map_redis` in `map_err`.
pub(crate) fn redis_err(e: RedisError) -> Error {
    StoreError::Redis(e).into()
}

/// The kind an error of the driver or server maps to.
pub(crate) fn kind_of(e: &RedisError) -> ErrorKind {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return ErrorKind::Unavailable;
    }
    match e.kind() {
        RedisKind::Server(
            Server::TryAgain
            | Server::ClusterDown
            | Server::BusyLoading
            | Server::MasterDown
            | Server::ReadOnly,
        )
        | RedisKind::ClusterConnectionNotFound => ErrorKind::Unavailable,
        RedisKind::AuthenticationFailed
        | RedisKind::InvalidClientConfig
        | RedisKind::Server(Server::CrossSlot) => ErrorKind::Misconfigured,
        _ => match code(e).as_deref() {
            Some("OUTBOX_NOT_FOUND") => ErrorKind::NotFound,
            Some("OUTBOX_CONFLICT") => ErrorKind::Conflict,
            Some("OUTBOX_LEASE_LOST") => ErrorKind::LeaseLost,
            Some("OUTBOX_INVALID") => ErrorKind::InvalidInput,
            Some("OOM") => ErrorKind::Unavailable,
            Some("NOAUTH" | "NOPERM" | "WRONGPASS") => ErrorKind::Misconfigured,
            _ => ErrorKind::Unexpected,
        },
    }
}

/// The error's code: the server's, or (a failed pipeline, whose error carries each failed
/// command's) the first failed command's.
fn code(e: &RedisError) -> Option<String> {
    e.code().map(str::to_owned).or_else(|| {
        let errors = e.clone().into_server_errors()?;
        errors.first().map(|(_, s)| s.code().to_owned())
    })
}

/// The error's detail (the text after the code), as [`code`] finds it.
fn detail(e: &RedisError) -> Option<String> {
    e.detail().map(str::to_owned).or_else(|| {
        let errors = e.clone().into_server_errors()?;
        errors.first()?.1.details().map(str::to_owned)
    })
}

/// Map a failure to open a connection ([`crate::RedisConfig::probe`]): say which of
/// unreachable, TLS or authentication it is (never the host or the password).
pub(crate) fn connect_error(e: RedisError) -> Error {
    let text = e.to_string().to_ascii_lowercase();
    let tls = text.contains("certificate")
        || text.contains("tls")
        || text.contains("handshake")
        || text.contains("invalid dns name");
    if tls {
        let cause = if text.contains("not valid for name") || text.contains("notvalidforname") {
            "the server certificate does not match the host name"
        } else if text.contains("unknown issuer") || text.contains("unknownissuer") {
            "the server certificate is not signed by a trusted root"
        } else if text.contains("expired") {
            "the server certificate is expired"
        } else {
            "the handshake failed (is the port a tls port?)"
        };
        return Error::new(
            ErrorKind::Misconfigured,
            format!("redis tls failed: {cause}"),
        )
        .with_source(e);
    }
    match kind_of(&e) {
        ErrorKind::Misconfigured => Error::new(
            ErrorKind::Misconfigured,
            "redis refused the credentials (authentication failed): check the user and password in the url",
        )
        .with_source(e),
        ErrorKind::Unavailable => {
            let cause = if e.is_connection_refusal() {
                "connection refused"
            } else if e.is_timeout() {
                "timed out"
            } else {
                "i/o error"
            };
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot reach redis ({cause}): check the host, the port and that the server is up"),
            )
            .with_source(e)
        }
        _ => map_redis(e),
    }
}

fn map_redis(e: RedisError) -> Error {
    match kind_of(&e) {
        ErrorKind::Unavailable => {
            Error::new(ErrorKind::Unavailable, "redis is unavailable").with_source(e)
        }
        ErrorKind::NotFound => {
            let what = match detail(&e).as_deref() {
                Some("endpoint") => "endpoint",
                Some("message") => "message",
                _ => "delivery",
            };
            Error::not_found(what).with_source(e)
        }
        ErrorKind::Conflict => {
            // The scripts' conflict details are fixed lowercase sentences of ours.
            let message = detail(&e)
                .unwrap_or_else(|| "the request conflicts with the current state".to_owned());
            Error::new(ErrorKind::Conflict, message).with_source(e)
        }
        ErrorKind::LeaseLost => Error::lease_lost().with_source(e),
        ErrorKind::Misconfigured => Error::new(
            ErrorKind::Misconfigured,
            "redis refused the connection's configuration or credentials",
        )
        .with_source(e),
        kind => Error::new(kind, "redis failed unexpectedly").with_source(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> RedisError {
        std::io::Error::new(kind, "x").into()
    }

    fn reply(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn errors_map_to_distinct_kinds() {
        use std::io::ErrorKind as Io;
        let rows: Vec<(RedisError, ErrorKind)> = vec![
            (io(Io::ConnectionRefused), ErrorKind::Unavailable),
            (io(Io::ConnectionReset), ErrorKind::Unavailable),
            (io(Io::UnexpectedEof), ErrorKind::Unavailable),
            (io(Io::TimedOut), ErrorKind::Unavailable),
            (
                (RedisKind::Server(Server::TryAgain), "x").into(),
                ErrorKind::Unavailable,
            ),
            (
                (RedisKind::Server(Server::ClusterDown), "x").into(),
                ErrorKind::Unavailable,
            ),
            (
                (RedisKind::Server(Server::BusyLoading), "x").into(),
                ErrorKind::Unavailable,
            ),
            (
                (RedisKind::AuthenticationFailed, "x").into(),
                ErrorKind::Misconfigured,
            ),
            ((RedisKind::Parse, "x").into(), ErrorKind::Unexpected),
            (
                (RedisKind::UnexpectedReturnType, "x").into(),
                ErrorKind::Unexpected,
            ),
            (
                (RedisKind::Server(Server::ResponseError), "x").into(),
                ErrorKind::Unexpected,
            ),
            (reply("OUTBOX_NOT_FOUND", "endpoint"), ErrorKind::NotFound),
            (
                reply("OUTBOX_CONFLICT", "only a dead delivery can be replayed"),
                ErrorKind::Conflict,
            ),
            (reply("OUTBOX_LEASE_LOST", "token"), ErrorKind::LeaseLost),
            (reply("OOM", "command not allowed"), ErrorKind::Unavailable),
            (reply("NOPERM", "no"), ErrorKind::Misconfigured),
            (reply("WRONGTYPE", "x"), ErrorKind::Unexpected),
        ];
        for (e, want) in rows {
            let code = format!("{e:?}");
            assert_eq!(Error::from(StoreError::Redis(e)).kind(), want, "{code}");
        }
        assert_eq!(corrupt("delivery").kind(), ErrorKind::Unexpected);
    }

    #[test]
    fn markers_keep_their_details() {
        let e = Error::from(StoreError::Redis(reply("OUTBOX_NOT_FOUND", "endpoint")));
        assert_eq!(e.field(), Some("endpoint"));
        let e = Error::from(StoreError::Redis(reply(
            "OUTBOX_CONFLICT",
            "only a dead delivery can be replayed",
        )));
        assert_eq!(e.message(), "only a dead delivery can be replayed");
    }
}
