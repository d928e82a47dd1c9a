//! The receiving half of outbox: an inbox that makes at-least-once delivery effectively
//! once.
//!
//! Every webhook sender delivers at least once and leaves the receiver to deduplicate. An
//! [`Inbox`] checks a Standard Webhooks request (signature with either secret of a rotation,
//! timestamp tolerance, size) and hands back the verified [`Received`] event; the application
//! then records its `webhook-id` **in its own database transaction**, the one in which it
//! applies the event ([`postgres::InboxTable::record`], [`sqlite::InboxTable::record`]). The
//! effect and the dedup record commit together or not at all: a crash between them leaves
//! neither, so the sender's retry applies the effect once; a duplicate finds the record and
//! the handler does not run again.
//!
//! ```text
//! let event = inbox.check(&headers, &body)?;            // 401 / 400 / 413 when refused
//! let mut tx = pool.begin().await?;
//! if table.record(&mut tx, &event).await? == Recorded::First {
//!     apply(&mut tx, &event).await?;                     // the effect, same transaction
//! }
//! tx.commit().await?;                                    // then answer 2xx
//! ```
//!
//! [`Answer`] maps each outcome to the status the sender's verdict table expects.

use std::time::Duration;

pub use outboxkit_core::{HeaderLookup, Verifier, VerifyError, WebhookSecret};

#[cfg(feature = "axum")]
pub mod axum;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// The largest body an [`Inbox`] accepts unless told otherwise (1 MiB).
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// The longest `webhook-id` an inbox records (Standard Webhooks ids are short; a longer one
/// is refused rather than stored).
pub const MAX_ID_LEN: usize = 256;

/// Checks received webhook requests: the verifier (secrets, header names, tolerance) and a
/// size limit.
#[derive(Debug)]
pub struct Inbox {
    verifier: Verifier,
    max_body: usize,
}

/// A verified request: its `webhook-id`, and the body exactly as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The `webhook-id` header: the sender's id of the message, the same on every retry.
    pub id: String,
    /// The body as received (verify first, then parse).
    pub body: Vec<u8>,
}

/// Why a request was refused, with the status the sender's verdict table expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// A required header is absent, or the signature does not verify: 401 (the sender
    /// treats it as a misconfigured secret and probes).
    Unauthorized(VerifyError),
    /// The timestamp is missing its number, too old or too far ahead: 400.
    BadTimestamp(VerifyError),
    /// The body is over the inbox's limit: 413.
    TooLarge {
        /// The body's size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The `webhook-id` is empty or longer than [`MAX_ID_LEN`]: 400.
    BadId,
}

impl Rejection {
    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Unauthorized(_) => 401,
            Rejection::BadTimestamp(_) | Rejection::BadId => 400,
            Rejection::TooLarge { .. } => 413,
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Unauthorized(e) | Rejection::BadTimestamp(e) => write!(f, "{e}"),
            Rejection::TooLarge { size, limit } => {
                write!(f, "the body is {size} bytes, over the limit of {limit}")
            }
            Rejection::BadId => {
                write!(f, "the webhook-id is empty or over {MAX_ID_LEN} bytes")
            }
        }
    }
}

impl std::error::Error for Rejection {}

impl Inbox {
    /// An inbox checking with `verifier` and the default body limit.
    pub fn new(verifier: Verifier) -> Self {
        Inbox {
            verifier,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// Refuse bodies over `bytes` with 413.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Check a request: the size, then the signature and timestamp over exactly `body`, then
    /// the id. Nothing is recorded: record the id in the transaction that applies the event.
    pub fn check(
        &self,
        headers: &(impl HeaderLookup + ?Sized),
        body: &[u8],
    ) -> Result<Received, Rejection> {
        if body.len() > self.max_body {
            return Err(Rejection::TooLarge {
                size: body.len(),
                limit: self.max_body,
            });
        }
        self.verifier.verify(headers, body).map_err(|e| match e {
            VerifyError::InvalidTimestamp | VerifyError::TooOld | VerifyError::TooNew => {
                Rejection::BadTimestamp(e)
            }
            other => Rejection::Unauthorized(other),
        })?;
        let id = headers.header("webhook-id").unwrap_or_default();
        if id.is_empty() || id.len() > MAX_ID_LEN {
            return Err(Rejection::BadId);
        }
        Ok(Received {
            id: id.to_owned(),
            body: body.to_vec(),
        })
    }
}

/// What recording an id found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The id is new: apply the event in the same transaction, then commit.
    First,
    /// The id was recorded by a committed transaction: the event was applied; do not apply
    /// it again, answer 2xx.
    Duplicate,
}

/// The answer to the sender, fitted to its verdict table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Applied now, or already applied (a duplicate): 200.
    Done,
    /// Refused (see [`Rejection::status`]).
    Refused(u16),
    /// The application's handler failed: 500, so the sender retries.
    Failed,
    /// The application asks to be called again later: 503 with `Retry-After`.
    RetryAfter(Duration),
}

impl Answer {
    /// The answer for a refused request.
    pub fn refused(r: &Rejection) -> Self {
        Answer::Refused(r.status())
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Answer::Done => 200,
            Answer::Refused(s) => *s,
            Answer::Failed => 500,
            Answer::RetryAfter(_) => 503,
        }
    }

    /// The `Retry-After` header value (whole seconds, at least 1), when there is one.
    pub fn retry_after(&self) -> Option<String> {
        match self {
            Answer::RetryAfter(d) => Some(d.as_secs().max(1).to_string()),
            _ => None,
        }
    }
}

/// A table name for an inbox: a plain identifier (letters, digits, `_`, not starting with a
/// digit, at most 63 bytes), so it can be written into statements unquoted-safe.
pub(crate) fn check_identifier(name: &str, what: &'static str) -> outboxkit_core::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(outboxkit_core::Error::misconfigured(
            what,
            format!(
                "`{name}` is not a plain identifier (letters, digits, `_`, at most 63 bytes, not starting with a digit)"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_fit_the_senders_verdict_table() {
        assert_eq!(Answer::Done.status(), 200);
        assert_eq!(Answer::Failed.status(), 500);
        let later = Answer::RetryAfter(Duration::from_millis(1500));
        assert_eq!(
            (later.status(), later.retry_after()),
            (503, Some("1".into()))
        );
        let r = Rejection::TooLarge { size: 2, limit: 1 };
        assert_eq!(Answer::refused(&r).status(), 413);
        assert_eq!(Rejection::BadId.status(), 400);
        assert_eq!(Rejection::Unauthorized(VerifyError::Mismatch).status(), 401);
        assert_eq!(Rejection::BadTimestamp(VerifyError::TooOld).status(), 400);
    }

    #[test]
    fn identifiers_are_plain() {
        assert!(check_identifier("inbox_events", "table").is_ok());
        for bad in ["", "1inbox", "in box", "a;drop", "x\"y", &"a".repeat(64)] {
            assert!(check_identifier(bad, "table").is_err(), "{bad}");
        }
    }
}
