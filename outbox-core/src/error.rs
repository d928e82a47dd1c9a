//! The one error type of the library: an opaque [`Error`] with an [`ErrorKind`].
//!
//! Messages are lowercase, without a trailing period, and never contain a payload, a secret
//! or an address. Adapters keep their own driver error enums and map them into [`Error`] in
//! their `error.rs`.

use std::borrow::Cow;
use std::fmt;

/// What kind of failure an [`Error`] is. Callers branch on this, never on message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The backend could not be reached or refused service for now (I/O, pool exhausted,
    /// `SQLITE_BUSY` past the busy timeout, connection reset). Retryable.
    Unavailable,
    /// An operation did not finish within its deadline. Retryable.
    Timeout,
    /// The request conflicts with the current state (a unique key exists, the delivery is
    /// not in a state that allows the operation).
    Conflict,
    /// The claim token no longer matches: the lease expired and another worker may own the
    /// delivery. The call changed nothing.
    LeaseLost,
    /// The named thing does not exist (or belongs to another tenant).
    NotFound,
    /// The caller passed a value that is not valid; nothing was written.
    InvalidInput,
    /// The library or a backend is configured in a way that cannot work.
    Misconfigured,
    /// A failure that fits no other kind (a bug, corrupt data, an unknown driver error).
    Unexpected,
}

impl ErrorKind {
    /// A stable lowercase name, as used in logs and in the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Conflict => "conflict",
            ErrorKind::LeaseLost => "lease lost",
            ErrorKind::NotFound => "not found",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Misconfigured => "misconfigured",
            ErrorKind::Unexpected => "unexpected",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type Source = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// The error of every fallible call in outbox.
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    field: Option<&'static str>,
    message: Cow<'static, str>,
    source: Option<Source>,
}

/// `Result<T, outboxkit_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with a short lowercase message.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            field: None,
            message: message.into(),
            source: None,
        }
    }

    /// An [`ErrorKind::InvalidInput`] error naming the offending field.
    pub fn invalid_input(field: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind: ErrorKind::InvalidInput,
            field: Some(field),
            message: message.into(),
            source: None,
        }
    }

    /// An [`ErrorKind::Misconfigured`] error naming the offending setting.
    pub fn misconfigured(field: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind: ErrorKind::Misconfigured,
            field: Some(field),
            message: message.into(),
            source: None,
        }
    }

    /// [`ErrorKind::LeaseLost`]: the claim token did not match.
    pub fn lease_lost() -> Self {
        Error::new(ErrorKind::LeaseLost, "the claim token no longer matches")
    }

    /// [`ErrorKind::NotFound`] for a thing of the given name (`delivery`, `endpoint`, ...).
    pub fn not_found(what: &'static str) -> Self {
        Error {
            kind: ErrorKind::NotFound,
            field: Some(what),
            message: Cow::Borrowed("not found"),
            source: None,
        }
    }

    /// Attach the underlying cause.
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        self.source = Some(std::sync::Arc::from(source.into()));
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The input field or setting the error is about, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        self.field
    }

    /// The message without the kind and field prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether trying the same call again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Timeout)
    }

    /// Shorthand for `kind() == ErrorKind::LeaseLost`.
    pub fn is_lease_lost(&self) -> bool {
        self.kind == ErrorKind::LeaseLost
    }

    /// Shorthand for `kind() == ErrorKind::NotFound`.
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(field) = self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind);
        if let Some(field) = self.field {
            d.field("field", &field);
        }
        d.field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_kind_and_field() {
        let e = Error::invalid_input("topic", "must not be empty");
        assert_eq!(e.to_string(), "invalid input: topic: must not be empty");
        assert_eq!(e.field(), Some("topic"));
        assert!(!e.is_retryable());
    }

    #[test]
    fn only_unavailable_and_timeout_are_retryable() {
        let kinds = [
            (ErrorKind::Unavailable, true),
            (ErrorKind::Timeout, true),
            (ErrorKind::Conflict, false),
            (ErrorKind::LeaseLost, false),
            (ErrorKind::NotFound, false),
            (ErrorKind::InvalidInput, false),
            (ErrorKind::Misconfigured, false),
            (ErrorKind::Unexpected, false),
        ];
        for (kind, retryable) in kinds {
            assert_eq!(Error::new(kind, "x").is_retryable(), retryable, "{kind}");
        }
    }

    #[test]
    fn source_is_kept() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let e = Error::new(ErrorKind::Unavailable, "connection lost").with_source(io);
        assert!(std::error::Error::source(&e).is_some());
    }
}
