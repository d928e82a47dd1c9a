//! [`SqliteConfig`]: where the database is and how it is opened.

use std::path::PathBuf;
use std::time::Duration;

use outboxkit_core::{Error, Limits, Result};

/// How hard SQLite syncs to disk at commit (`PRAGMA synchronous`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// `NORMAL` (the default): in WAL mode a commit is durable across a process crash, and
    /// across a power loss up to the last checkpoint; never corrupt.
    #[default]
    Normal,
    /// `FULL`: every commit is fsynced to the WAL; durable across a power loss too, slower.
    Full,
}

impl Synchronous {
    pub(crate) fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// How to open a [`crate::SqliteStore`].
///
/// ```
/// use outboxkit_sqlite::{SqliteConfig, Synchronous};
/// let mut config = SqliteConfig::new("outbox.db");
/// config.synchronous = Synchronous::Full;
/// assert_eq!(config.busy_timeout, std::time::Duration::from_secs(5));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteConfig {
    /// The database file (created when missing), or `:memory:` for a private in-memory
    /// database (one process, one connection: no readers, no `enqueue_in` from other
    /// connections).
    pub path: PathBuf,
    /// `synchronous` for every connection. Default [`Synchronous::Normal`].
    pub synchronous: Synchronous,
    /// How long a statement waits for a lock held by another connection or process before
    /// it fails with `Unavailable`. Default 5 s; from 1 ms to 10 min.
    pub busy_timeout: Duration,
    /// Read-only connections (each on its own thread) for listings, reads and stats, beside
    /// the one writer. Default 2, at most 16; 0 sends reads to the writer.
    pub readers: usize,
    /// Limits applied to every enqueue.
    pub limits: Limits,
}

impl SqliteConfig {
    /// The defaults for the database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            readers: 2,
            limits: Limits::default(),
        }
    }

    /// A private in-memory database (`:memory:`).
    pub fn in_memory() -> Self {
        Self::new(":memory:")
    }

    /// Whether the path names a private in-memory database.
    pub fn is_memory(&self) -> bool {
        self.path.as_os_str() == ":memory:"
    }

    /// Check every setting.
    pub fn validate(&self) -> Result<()> {
        if self.path.as_os_str().is_empty() {
            return Err(Error::misconfigured(
                "path",
                "must name a file or `:memory:`",
            ));
        }
        if self.busy_timeout < Duration::from_millis(1)
            || self.busy_timeout > Duration::from_secs(600)
        {
            return Err(Error::misconfigured(
                "busy_timeout",
                "must be from 1 ms to 10 min",
            ));
        }
        if self.readers > 16 {
            return Err(Error::misconfigured("readers", "must be at most 16"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused() {
        assert!(SqliteConfig::new("a.db").validate().is_ok());
        assert!(SqliteConfig::in_memory().is_memory());
        let field = |c: SqliteConfig| c.validate().unwrap_err().field();
        assert_eq!(field(SqliteConfig::new("")), Some("path"));
        let mut c = SqliteConfig::new("a.db");
        c.busy_timeout = Duration::ZERO;
        assert_eq!(field(c.clone()), Some("busy_timeout"));
        c.busy_timeout = Duration::from_secs(1);
        c.readers = 17;
        assert_eq!(field(c), Some("readers"));
    }
}
