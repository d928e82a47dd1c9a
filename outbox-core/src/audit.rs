//! The audit log: one [`AuditEntry`] per state-changing action through the admin API, the
//! console or the CLI (who, what, which target, when, from where), kept by a
//! [`crate::ConsoleStore`] and read newest first, a tenant seeing only its own entries.
//!
//! An entry never holds a secret or a payload: `detail` is a short, operator-readable note
//! (at most [`MAX_AUDIT_DETAIL`] bytes). Entries are removed by
//! [`crate::ConsoleStore::purge_audit`]; `outbox serve` keeps [`AUDIT_RETENTION_DEFAULT`]
//! (90 days).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{AuditId, TenantId};
use crate::time::{Entropy, Timestamp};

/// How long `outbox serve` keeps audit entries: 90 days.
pub const AUDIT_RETENTION_DEFAULT: Duration = Duration::from_secs(90 * 24 * 3600);

/// The longest `actor`, `action`, `target` and `source`, in bytes.
pub const MAX_AUDIT_FIELD: usize = 200;

/// The longest `detail`, in bytes.
pub const MAX_AUDIT_DETAIL: usize = 500;

/// One state-changing action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its id (UUIDv7, from `at`).
    pub id: AuditId,
    /// When it happened.
    pub at: Timestamp,
    /// The tenant acted on; `None` for an admin-scope action (tokens, the catalogue, …).
    pub tenant: Option<TenantId>,
    /// Who: `token:<id> (<label>)`, or `cli` (with the OS user when known).
    pub actor: String,
    /// What, as `noun.verb`: `delivery.replay`, `endpoint.pause`, `token.revoke`,
    /// `session.login`, …
    pub action: String,
    /// On what: an id, a name or a filter.
    pub target: String,
    /// A short note (counts, the new status); never a secret or a payload.
    pub detail: String,
    /// The client's address as the server saw it.
    pub source: Option<String>,
}

impl AuditEntry {
    /// A new entry at `at` with an empty detail and no source.
    pub fn new(
        at: Timestamp,
        entropy: &dyn Entropy,
        tenant: Option<TenantId>,
        actor: impl Into<String>,
        action: impl Into<String>,
        target: impl Into<String>,
    ) -> Self {
        AuditEntry {
            id: AuditId::generate(at, entropy),
            at,
            tenant,
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            detail: String::new(),
            source: None,
        }
    }

    /// With a detail, cut to [`MAX_AUDIT_DETAIL`] bytes (on a character boundary) and
    /// control characters replaced by spaces.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = clean(&detail.into(), MAX_AUDIT_DETAIL);
        self
    }

    /// With the client's address.
    pub fn with_source(mut self, source: Option<String>) -> Self {
        self.source = source.map(|s| clean(&s, MAX_AUDIT_FIELD));
        self
    }

    /// Check what a store is asked to write: `actor` and `action` of 1–200 bytes,
    /// `target` and `source` of at most 200, `detail` of at most 500, no control characters.
    pub fn validate(&self) -> Result<()> {
        let fields = [
            ("actor", self.actor.as_str(), MAX_AUDIT_FIELD, true),
            ("action", self.action.as_str(), MAX_AUDIT_FIELD, true),
            ("target", self.target.as_str(), MAX_AUDIT_FIELD, false),
            ("detail", self.detail.as_str(), MAX_AUDIT_DETAIL, false),
            (
                "source",
                self.source.as_deref().unwrap_or(""),
                MAX_AUDIT_FIELD,
                false,
            ),
        ];
        for (name, value, max, required) in fields {
            if required && value.is_empty() {
                return Err(Error::invalid_input(name, "must not be empty"));
            }
            if value.len() > max {
                return Err(Error::invalid_input(
                    name,
                    format!("must be at most {max} bytes"),
                ));
            }
            if value.chars().any(char::is_control) {
                return Err(Error::invalid_input(
                    name,
                    "must not contain control characters",
                ));
            }
        }
        Ok(())
    }
}

/// `s` without control characters, cut to at most `max` bytes on a character boundary.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// A position in the newest-first audit listing: the last entry's `(at, id)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AuditCursor {
    /// The last entry's time.
    pub at: Timestamp,
    /// The last entry's id.
    pub id: AuditId,
}

impl AuditCursor {
    /// The cursor after `e`.
    pub fn after(e: &AuditEntry) -> Self {
        AuditCursor { at: e.at, id: e.id }
    }

    /// Whether `e` comes after this cursor in newest-first order.
    pub fn precedes(&self, e: &AuditEntry) -> bool {
        (e.at, e.id) < (self.at, self.id)
    }

    /// The opaque text form.
    pub fn encode(&self) -> String {
        format!(
            "{}.{}",
            self.at.as_unix_millis(),
            self.id.as_uuid().simple()
        )
    }

    /// Parse [`AuditCursor::encode`].
    pub fn decode(s: &str) -> Result<Self> {
        let bad = || Error::invalid_input("cursor", "is not a cursor returned by this library");
        let (ms, id) = s.split_once('.').ok_or_else(bad)?;
        let ms: i64 = ms.parse().map_err(|_| bad())?;
        Ok(AuditCursor {
            at: Timestamp::from_unix_millis(ms).map_err(|_| bad())?,
            id: AuditId::parse(id).map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for AuditCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// One page of the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    /// The entries, newest first.
    pub items: Vec<AuditEntry>,
    /// Where the next page starts; `None` when there is no more.
    pub next: Option<AuditCursor>,
}

impl AuditPage {
    /// The page of at most `limit` entries from `sorted` (newest first, already after the
    /// cursor): the in-memory paging every store reproduces.
    pub fn from_sorted(sorted: Vec<AuditEntry>, limit: u32) -> Self {
        let limit = limit as usize;
        let more = sorted.len() > limit;
        let items: Vec<AuditEntry> = sorted.into_iter().take(limit).collect();
        let next = if more {
            items.last().map(AuditCursor::after)
        } else {
            None
        };
        AuditPage { items, next }
    }
}

/// Check an audit page limit (1–1000).
pub fn check_audit_limit(limit: u32) -> Result<()> {
    if !(1..=1000).contains(&limit) {
        return Err(Error::invalid_input("limit", "must be from 1 to 1000"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OsEntropy;

    fn entry() -> AuditEntry {
        let at = Timestamp::from_unix_millis(1_700_000_000_000).unwrap();
        AuditEntry::new(at, &OsEntropy, None, "cli", "token.revoke", "t1")
    }

    #[test]
    fn details_are_cut_and_cleaned() {
        let e = entry().with_detail(format!("a\nb{}", "é".repeat(400)));
        assert!(e.detail.len() <= MAX_AUDIT_DETAIL);
        assert!(e.detail.starts_with("a b"));
        assert!(e.validate().is_ok());
    }

    #[test]
    fn bad_fields_are_refused() {
        let mut e = entry();
        e.actor.clear();
        assert!(e.validate().is_err());
        let mut e = entry();
        e.target = "x\u{7}".into();
        assert!(e.validate().is_err());
        let mut e = entry();
        e.action = "x".repeat(201);
        assert!(e.validate().is_err());
    }

    #[test]
    fn cursors_round_trip() {
        let c = AuditCursor::after(&entry());
        assert_eq!(AuditCursor::decode(&c.encode()).unwrap(), c);
        assert!(AuditCursor::decode("nope").is_err());
    }
}
