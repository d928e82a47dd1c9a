//! Driver errors → [`outboxkit_core::Error`]: the classification table.
//!
//! | driver error | kind |
//! | --- | --- |
//! | I/O, TLS, pool timed out, pool closed, worker crashed | `Unavailable` |
//! | SQLSTATE class 08 (connection), 57P01-57P05 (shutdown, crash, cannot connect now), 53 (insufficient resources), 40001 / 40P01 (serialization, deadlock), 55P03 / 55006 (lock or object in use) | `Unavailable` |
//! | 57014 (statement timeout or cancel) | `Timeout` |
//! | 23505 (unique violation), class 25 (transaction state: the caller's transaction is aborted or read-only) | `Conflict` |
//! | class 22 (data exception), other class 23 (integrity), `Encode`, `InvalidArgument` | `InvalidInput` |
//! | class 42 (undefined table, syntax: not migrated), 3F000 (no such schema), class 28 (authentication), `Configuration`, `TypeNotFound` | `Misconfigured` |
//! | `RowNotFound` | `NotFound` |
//! | anything else (protocol, decode, unknown codes) | `Unexpected` |
//!
//! Messages are fixed lowercase text naming the SQLSTATE at most (and, for a missing table
//! or schema, that `outbox migrate` creates it); the driver error is kept as the source.
//!
//! Opening a connection ([`crate::PostgresConfig::connect_pool`]) names the cause instead:
//!
//! | failure | kind | message says |
//! | --- | --- | --- |
//! | refused, reset, no route, DNS | `Unavailable` | cannot reach the server |
//! | no answer within `connect_timeout` | `Unavailable` | did not answer in time |
//! | TLS handshake or certificate | `Misconfigured` | tls failed, with the `sslmode` and the reason |
//! | class 28 (authentication) | `Misconfigured` | the credentials were refused |
//! | 3D000 (no such database) | `Misconfigured` | the database does not exist |

use std::io;

use outboxkit_core::{Error, ErrorKind};
use sqlx::postgres::PgSslMode;

/// Errors of this crate that are not driver errors.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// A stored value could not be read back.
    #[error("a stored value of column `{0}` is not valid")]
    Corrupt(&'static str),
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::new(ErrorKind::Unexpected, "a stored row is not valid").with_source(e)
    }
}

/// The kind of a SQLSTATE code.
pub fn classify_sqlstate(code: &str) -> ErrorKind {
    match code {
        "23505" => ErrorKind::Conflict,
        "57014" => ErrorKind::Timeout,
        "40001" | "40P01" | "55P03" | "55006" => ErrorKind::Unavailable,
        "57P01" | "57P02" | "57P03" | "57P04" | "57P05" => ErrorKind::Unavailable,
        "3F000" | "3D000" => ErrorKind::Misconfigured,
        _ => match code.get(..2) {
            Some("08" | "53") => ErrorKind::Unavailable,
            Some("22" | "23") => ErrorKind::InvalidInput,
            Some("25") => ErrorKind::Conflict,
            Some("42" | "28") => ErrorKind::Misconfigured,
            _ => ErrorKind::Unexpected,
        },
    }
}

/// The kind of a driver error.
pub fn classify(e: &sqlx::Error) -> ErrorKind {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => ErrorKind::Unavailable,
        sqlx::Error::Database(db) => db
            .code()
            .map_or(ErrorKind::Unexpected, |c| classify_sqlstate(&c)),
        sqlx::Error::Configuration(_) | sqlx::Error::TypeNotFound { .. } => {
            ErrorKind::Misconfigured
        }
        sqlx::Error::RowNotFound => ErrorKind::NotFound,
        sqlx::Error::Encode(_) | sqlx::Error::InvalidArgument(_) => ErrorKind::InvalidInput,
        sqlx::Error::Protocol(msg) if is_connection_loss(msg) => ErrorKind::Unavailable,
        _ => ErrorKind::Unexpected,
    }
}

/// sqlx reports a few connection losses as protocol errors.
fn is_connection_loss(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("connection closed") || m.contains("connection reset") || m.contains("eof")
}

/// Map a driver error to the library's error, keeping it as the source.
pub fn map_err(e: sqlx::Error) -> Error {
    let kind = classify(&e);
    let message: String = match &e {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) if is_unmigrated(&code) => format!(
                "postgres error {code}: the outbox tables are missing; create them with `outbox migrate` (or PostgresStore::migrate)"
            ),
            Some(code) => format!("postgres error {code}"),
            None => "postgres error".to_owned(),
        },
        sqlx::Error::Io(_) => "postgres connection failed".to_owned(),
        sqlx::Error::Tls(_) => "postgres tls failed".to_owned(),
        sqlx::Error::PoolTimedOut => "timed out waiting for a postgres connection".to_owned(),
        sqlx::Error::PoolClosed => "the postgres pool is closed".to_owned(),
        sqlx::Error::RowNotFound => "no such row".to_owned(),
        _ => format!("postgres driver error ({kind})"),
    };
    Error::new(kind, message).with_source(e)
}

/// An undefined table, column or function (class 42 codes 42P01, 42703, 42883) or a
/// missing schema (3F000): the outbox schema is not there, or older than this code.
fn is_unmigrated(code: &str) -> bool {
    matches!(code, "42P01" | "42703" | "42883" | "3F000")
}

/// The name of an `sslmode`, as written in the URL.
pub(crate) fn ssl_mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// Map a failure to open a connection: say which of unreachable, TLS, authentication or
/// missing database it is (never the host, the user or the password).
pub fn connect_error(e: sqlx::Error, mode: PgSslMode) -> Error {
    let (kind, message) = match &e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("3D000") => (
                ErrorKind::Misconfigured,
                "postgres: the database does not exist (check the database name in the url)"
                    .to_owned(),
            ),
            Some(c) if c.starts_with("28") => (
                ErrorKind::Misconfigured,
                format!("postgres refused the credentials (authentication failed, {c}): check the user and password"),
            ),
            Some(c) => (classify_sqlstate(c), format!("postgres refused the connection ({c})")),
            None => (ErrorKind::Unexpected, "postgres refused the connection".to_owned()),
        },
        sqlx::Error::Tls(reason) => (
            ErrorKind::Misconfigured,
            format!("postgres tls failed (sslmode={}): {}", ssl_mode_name(mode), tls_cause(&reason.to_string())),
        ),
        sqlx::Error::Io(io) if is_tls_io(io) => (
            ErrorKind::Misconfigured,
            format!("postgres tls failed (sslmode={}): {}", ssl_mode_name(mode), tls_cause(&io.to_string())),
        ),
        sqlx::Error::Io(io) => (
            ErrorKind::Unavailable,
            format!("cannot reach postgres ({}): check the host, the port and that the server is up", io_cause(io)),
        ),
        sqlx::Error::Configuration(_) => (
            ErrorKind::Misconfigured,
            "postgres connection settings are invalid (check the url and its sslrootcert)".to_owned(),
        ),
        _ => return map_err(e),
    };
    Error::new(kind, message).with_source(e)
}

/// A TLS failure reported by the stream (rustls reports a bad certificate as invalid data).
fn is_tls_io(e: &io::Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    e.kind() == io::ErrorKind::InvalidData
        && (text.contains("certificate") || text.contains("tls") || text.contains("handshake"))
}

/// The cause of an I/O failure, in a few words.
fn io_cause(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused",
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => "connection reset",
        io::ErrorKind::TimedOut => "timed out",
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => "host unreachable",
        io::ErrorKind::NotFound => "host name not found",
        _ => "i/o error",
    }
}

/// The cause of a TLS failure in fixed words (the driver's text may name the host).
fn tls_cause(reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    if r.contains("notvalidforname") || r.contains("not valid for name") {
        "the server certificate does not match the host name (verify-full)"
    } else if r.contains("unknownissuer")
        || r.contains("unknown issuer")
        || r.contains("badsignature")
    {
        "the server certificate is not signed by a trusted root (set sslrootcert)"
    } else if r.contains("expired") || r.contains("notvalidyet") {
        "the server certificate is expired or not yet valid"
    } else if r.contains("does not support") || r.contains("not support tls") {
        "the server does not accept tls (sslmode requires it)"
    } else if r.contains("certificate") || r.contains("pem") || r.contains("no such file") {
        "the certificate could not be read or checked (sslrootcert)"
    } else {
        "the handshake failed"
    }
}

/// `.db()` on driver results.
pub(crate) trait DbResult<T> {
    /// Map the error with [`map_err`].
    fn db(self) -> outboxkit_core::Result<T>;
}

impl<T> DbResult<T> for std::result::Result<T, sqlx::Error> {
    fn db(self) -> outboxkit_core::Result<T> {
        self.map_err(map_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstate_table() {
        let rows = [
            ("23505", ErrorKind::Conflict),
            ("23503", ErrorKind::InvalidInput),
            ("23514", ErrorKind::InvalidInput),
            ("22P02", ErrorKind::InvalidInput),
            ("22001", ErrorKind::InvalidInput),
            ("57P01", ErrorKind::Unavailable),
            ("57P03", ErrorKind::Unavailable),
            ("08006", ErrorKind::Unavailable),
            ("08001", ErrorKind::Unavailable),
            ("53300", ErrorKind::Unavailable),
            ("40001", ErrorKind::Unavailable),
            ("40P01", ErrorKind::Unavailable),
            ("55P03", ErrorKind::Unavailable),
            ("57014", ErrorKind::Timeout),
            ("25P02", ErrorKind::Conflict),
            ("25006", ErrorKind::Conflict),
            ("42P01", ErrorKind::Misconfigured),
            ("42601", ErrorKind::Misconfigured),
            ("3F000", ErrorKind::Misconfigured),
            ("28P01", ErrorKind::Misconfigured),
            ("XX000", ErrorKind::Unexpected),
            ("P0001", ErrorKind::Unexpected),
        ];
        for (code, kind) in rows {
            assert_eq!(classify_sqlstate(code), kind, "{code}");
        }
    }

    #[test]
    fn connect_error_table() {
        use std::io::ErrorKind as Io;
        let io = |k: Io, text: &str| sqlx::Error::Io(std::io::Error::new(k, text.to_owned()));
        let rows = [
            (io(Io::ConnectionRefused, "refused"), ErrorKind::Unavailable, "cannot reach postgres (connection refused)"),
            (io(Io::TimedOut, "t"), ErrorKind::Unavailable, "cannot reach postgres (timed out)"),
            (
                io(Io::InvalidData, "invalid peer certificate: certificate not valid for name \"db.example\"; NotValidForName"),
                ErrorKind::Misconfigured,
                "does not match the host name",
            ),
            (
                io(Io::InvalidData, "invalid peer certificate: UnknownIssuer"),
                ErrorKind::Misconfigured,
                "not signed by a trusted root",
            ),
            (
                sqlx::Error::Tls("server does not support TLS".into()),
                ErrorKind::Misconfigured,
                "the server does not accept tls",
            ),
            (sqlx::Error::PoolTimedOut, ErrorKind::Unavailable, "timed out waiting"),
        ];
        for (e, kind, text) in rows {
            let mapped = connect_error(e, PgSslMode::VerifyFull);
            assert_eq!(mapped.kind(), kind, "{mapped}");
            assert!(mapped.to_string().contains(text), "{mapped}");
            assert!(
                !mapped.to_string().contains("db.example"),
                "no host name: {mapped}"
            );
        }
        assert!(is_unmigrated("42P01") && is_unmigrated("3F000") && !is_unmigrated("23505"));
    }

    #[test]
    fn driver_error_table() {
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let rows = [
            (sqlx::Error::Io(io()), ErrorKind::Unavailable),
            (sqlx::Error::PoolTimedOut, ErrorKind::Unavailable),
            (sqlx::Error::PoolClosed, ErrorKind::Unavailable),
            (sqlx::Error::WorkerCrashed, ErrorKind::Unavailable),
            (sqlx::Error::RowNotFound, ErrorKind::NotFound),
            (
                sqlx::Error::Protocol("unexpected eof".into()),
                ErrorKind::Unavailable,
            ),
            (
                sqlx::Error::Protocol("unknown message".into()),
                ErrorKind::Unexpected,
            ),
            (
                sqlx::Error::ColumnNotFound("x".into()),
                ErrorKind::Unexpected,
            ),
            (
                sqlx::Error::InvalidArgument("x".into()),
                ErrorKind::InvalidInput,
            ),
        ];
        for (e, kind) in rows {
            let label = format!("{e:?}");
            let mapped = map_err(e);
            assert_eq!(mapped.kind(), kind, "{label}");
            assert!(std::error::Error::source(&mapped).is_some());
        }
        assert!(map_err(sqlx::Error::PoolTimedOut).is_retryable());
    }
}
