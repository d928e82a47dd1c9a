//! Driver errors mapped to [`outboxkit_core::ErrorKind`].
//!
//! | SQLite | kind |
//! | --- | --- |
//! | `SQLITE_BUSY`, `SQLITE_LOCKED` (after the busy timeout) | `Unavailable` |
//! | I/O error, cannot open, disk full, out of memory, locking protocol, schema changed | `Unavailable` |
//! | unique / primary key constraint | `Conflict` |
//! | other constraints (a bug in this crate) | `Unexpected` |
//! | not a database, corrupt | `Misconfigured` (`path`: the file is not a usable database) |
//! | cannot open or create the file when opening the store | `Misconfigured` (`path`) |
//! | schema newer than this crate | `Misconfigured` (`path`) |
//! | read-only database, permission denied | `Misconfigured` |
//! | string or blob too big | `InvalidInput` |
//! | a stored value that does not decode | `Unexpected` (corrupt data) |
//! | anything else | `Unexpected` |

use std::time::Duration;

use outboxkit_core::{Error, ErrorKind, Stopwatch};
use rusqlite::ffi;
use rusqlite::ErrorCode;

/// The crate's own failures; every fallible internal step returns this and the public API
/// turns it into an [`outboxkit_core::Error`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum SqliteError {
    /// An error from SQLite or rusqlite.
    #[error(transparent)]
    Driver(#[from] rusqlite::Error),
    /// An error already in the library's terms (validation, lease lost, not found).
    #[error(transparent)]
    Core(#[from] Error),
    /// A stored value that does not decode into the domain type.
    #[error("a stored {0} could not be read (corrupt data)")]
    Corrupt(&'static str),
    /// The file at the path is not a SQLite database.
    #[error("the file is not a sqlite database")]
    NotADatabase,
    /// The database file could not be opened or created (missing directory, permissions).
    #[error("the database file cannot be opened or created (check that its directory exists and is writable)")]
    CannotOpen(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The database was written by a newer version of this crate.
    #[error(
        "the database schema version {found} is newer than this library supports ({supported})"
    )]
    SchemaTooNew {
        /// The version found.
        found: i64,
        /// The newest version this crate knows.
        supported: i64,
    },
    /// The file could not be inspected before opening.
    #[error("the database file could not be read")]
    Io(#[from] std::io::Error),
}

impl SqliteError {
    /// Whether SQLite reported the database busy or locked (worth retrying within the busy
    /// timeout).
    pub(crate) fn is_busy(&self) -> bool {
        matches!(
            self,
            SqliteError::Driver(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                )
        )
    }
}

/// A shorthand for internal results.
pub(crate) type Result<T, E = SqliteError> = std::result::Result<T, E>;

/// Run `f` again while SQLite reports the database busy and the busy timeout has not
/// passed. SQLite's own busy handler already waits for most locks; this covers the cases it
/// does not (a WAL snapshot or recovery in progress), so a busy error means the timeout
/// really passed.
pub(crate) fn retry_busy<T>(timeout: Duration, mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let watch = Stopwatch::start();
    let mut pause = Duration::from_millis(1);
    loop {
        match f() {
            Err(e) if e.is_busy() && watch.elapsed() + pause < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

impl From<SqliteError> for Error {
    fn from(e: SqliteError) -> Self {
        match e {
            SqliteError::Core(e) => e,
            SqliteError::Driver(e) => driver(e),
            SqliteError::Corrupt(_) => Error::new(ErrorKind::Unexpected, e.to_string()),
            SqliteError::NotADatabase => Error::misconfigured(
                "path",
                "the file is not a sqlite database; it was left untouched",
            ),
            SqliteError::SchemaTooNew { .. } => Error::misconfigured("path", e.to_string()),
            SqliteError::CannotOpen(source) => Error::misconfigured(
                "path",
                "the database file cannot be opened or created (check that its directory \
                 exists and is writable)",
            )
            .with_source(source),
            SqliteError::Io(io) => Error::new(
                ErrorKind::Unavailable,
                "the database file could not be read",
            )
            .with_source(io),
        }
    }
}

/// Map one rusqlite error.
pub(crate) fn driver(e: rusqlite::Error) -> Error {
    use rusqlite::Error as E;
    let (kind, message): (ErrorKind, &'static str) = match &e {
        E::SqliteFailure(f, _) => classify(f),
        E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::InvalidColumnType(..)
        | E::Utf8Error(..) => (
            ErrorKind::Unexpected,
            "a stored value could not be read (corrupt data)",
        ),
        E::QueryReturnedNoRows => (ErrorKind::NotFound, "not found"),
        E::SqliteSingleThreadedMode => (
            ErrorKind::Misconfigured,
            "sqlite was built without thread support",
        ),
        _ => (ErrorKind::Unexpected, "an unexpected sqlite error"),
    };
    let err = if kind == ErrorKind::Misconfigured {
        Error::misconfigured("path", message)
    } else {
        Error::new(kind, message)
    };
    err.with_source(e)
}

/// The classification table for SQLite result codes.
fn classify(f: &ffi::Error) -> (ErrorKind, &'static str) {
    match f.code {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => (
            ErrorKind::Unavailable,
            "the database is locked by another connection past the busy timeout",
        ),
        ErrorCode::SystemIoFailure
        | ErrorCode::CannotOpen
        | ErrorCode::DiskFull
        | ErrorCode::FileLockingProtocolFailed
        | ErrorCode::NoLargeFileSupport => (
            ErrorKind::Unavailable,
            "the database file could not be read or written",
        ),
        ErrorCode::OutOfMemory => (ErrorKind::Unavailable, "sqlite ran out of memory"),
        ErrorCode::SchemaChanged => (
            ErrorKind::Unavailable,
            "the database schema changed during the statement",
        ),
        ErrorCode::ConstraintViolation => match f.extended_code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                (ErrorKind::Conflict, "a row with this key already exists")
            }
            _ => (ErrorKind::Unexpected, "a database constraint failed"),
        },
        ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => (
            ErrorKind::Misconfigured,
            "the file is corrupt or not a sqlite database",
        ),
        ErrorCode::ReadOnly | ErrorCode::PermissionDenied => (
            ErrorKind::Misconfigured,
            "the database is read-only or its file is not accessible",
        ),
        ErrorCode::TooBig => (
            ErrorKind::InvalidInput,
            "a value is larger than sqlite accepts",
        ),
        ErrorCode::OperationInterrupted => {
            (ErrorKind::Unavailable, "the statement was interrupted")
        }
        _ => (ErrorKind::Unexpected, "an unexpected sqlite error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
    }

    #[test]
    fn classification_table() {
        let rows = [
            (ffi::SQLITE_BUSY, ErrorKind::Unavailable),
            (ffi::SQLITE_LOCKED, ErrorKind::Unavailable),
            (ffi::SQLITE_IOERR, ErrorKind::Unavailable),
            (ffi::SQLITE_FULL, ErrorKind::Unavailable),
            (ffi::SQLITE_CONSTRAINT_UNIQUE, ErrorKind::Conflict),
            (ffi::SQLITE_CONSTRAINT_PRIMARYKEY, ErrorKind::Conflict),
            (ffi::SQLITE_CONSTRAINT_NOTNULL, ErrorKind::Unexpected),
            (ffi::SQLITE_NOTADB, ErrorKind::Misconfigured),
            (ffi::SQLITE_CORRUPT, ErrorKind::Misconfigured),
            (ffi::SQLITE_READONLY, ErrorKind::Misconfigured),
            (ffi::SQLITE_TOOBIG, ErrorKind::InvalidInput),
            (ffi::SQLITE_MISMATCH, ErrorKind::Unexpected),
        ];
        for (code, kind) in rows {
            let e = driver(failure(code));
            assert_eq!(e.kind(), kind, "code {code}");
            assert!(std::error::Error::source(&e).is_some());
            assert_eq!(e.message(), e.message().to_lowercase());
            assert!(!e.message().ends_with('.'));
        }
        assert!(SqliteError::from(failure(ffi::SQLITE_BUSY)).is_busy());
        assert!(!SqliteError::from(failure(ffi::SQLITE_IOERR)).is_busy());
        let corrupt = Error::from(SqliteError::NotADatabase);
        assert_eq!(corrupt.kind(), ErrorKind::Misconfigured);
        assert!(corrupt.message().contains("not a sqlite database"));
    }
}
