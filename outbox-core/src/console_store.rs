//! What the console and the admin API keep beside the outbox: the audit log
//! ([`crate::audit`]), console sessions ([`ConsoleSession`]) and per-minute activity for the
//! charts ([`ActivityQuery`]), in the [`ConsoleStore`] every backend implements.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::audit::{AuditCursor, AuditEntry, AuditPage};
use crate::error::{Error, Result};
use crate::ids::{EndpointId, TenantId, TokenId};
use crate::model::AttemptOutcome;
use crate::time::Timestamp;
use crate::tokens::TokenScope;

/// The most live console sessions one token keeps; a new login past it ends the oldest.
pub const MAX_SESSIONS_PER_TOKEN: usize = 16;

/// The longest CSRF token a session keeps, in bytes.
pub const MAX_CSRF: usize = 128;

/// One console login, as stored: the SHA-256 of the cookie's value, never the value.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// SHA-256 of the session cookie's value ([`ConsoleSession::hash_of`]).
    pub id_hash: [u8; 32],
    /// The token it was opened with (revoking it ends the session).
    pub token: TokenId,
    /// That token's scope.
    pub scope: TokenScope,
    /// Whether the token may only read.
    pub read_only: bool,
    /// The session's CSRF token (sent back with every form).
    pub csrf: String,
    /// When it was opened.
    pub created_at: Timestamp,
    /// When it ends.
    pub expires_at: Timestamp,
}

impl ConsoleSession {
    /// The stored id of a cookie value.
    pub fn hash_of(cookie: &str) -> [u8; 32] {
        Sha256::digest(cookie.as_bytes()).into()
    }

    /// Check what a store is asked to write: a CSRF token of 1–128 visible ASCII bytes,
    /// and an expiry after its creation.
    pub fn validate(&self) -> Result<()> {
        if self.csrf.is_empty()
            || self.csrf.len() > MAX_CSRF
            || !self.csrf.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Error::invalid_input(
                "csrf",
                "must be 1 to 128 visible ASCII bytes",
            ));
        }
        if self.expires_at <= self.created_at {
            return Err(Error::invalid_input(
                "expires_at",
                "must be after created_at",
            ));
        }
        Ok(())
    }

    /// Whether it is still live at `now`.
    pub fn live_at(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }
}

impl fmt::Debug for ConsoleSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsoleSession")
            .field("token", &self.token)
            .field("scope", &self.scope)
            .field("read_only", &self.read_only)
            .field("created_at", &self.created_at)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The longest activity range: 24 hours.
pub const MAX_ACTIVITY_RANGE: Duration = Duration::from_secs(24 * 3600);

/// The most buckets one activity query answers.
pub const MAX_ACTIVITY_BUCKETS: u64 = 1_440;

/// Which attempts to count, and in which buckets: `[since, until)` cut into buckets of
/// `bucket` from `since` (the last one may be shorter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivityQuery {
    /// The tenant.
    pub tenant: TenantId,
    /// Only attempts of deliveries to this endpoint.
    pub endpoint: Option<EndpointId>,
    /// The first bucket's start.
    pub since: Timestamp,
    /// The end of the range (exclusive).
    pub until: Timestamp,
    /// Each bucket's length (a whole number of seconds, at least one).
    pub bucket: Duration,
}

impl ActivityQuery {
    /// Check the range: `since < until`, at most 24 hours, a bucket of whole seconds, at
    /// most 1,440 buckets. Every store calls this first.
    pub fn validate(&self) -> Result<()> {
        if self.until <= self.since {
            return Err(Error::invalid_input("until", "must be after since"));
        }
        if self.until.duration_since(self.since) > MAX_ACTIVITY_RANGE {
            return Err(Error::invalid_input(
                "since",
                "the range must be at most 24 h",
            ));
        }
        if self.bucket.as_secs() == 0 || self.bucket.subsec_nanos() != 0 {
            return Err(Error::invalid_input(
                "bucket",
                "must be a whole number of seconds, at least 1",
            ));
        }
        if self.bucket_count() > MAX_ACTIVITY_BUCKETS {
            return Err(Error::invalid_input(
                "bucket",
                "the range must hold at most 1440 buckets",
            ));
        }
        Ok(())
    }

    /// The bucket length in milliseconds.
    pub fn bucket_millis(&self) -> i64 {
        self.bucket.as_millis() as i64
    }

    /// How many buckets the range holds.
    pub fn bucket_count(&self) -> u64 {
        let span = (self.until.as_unix_millis() - self.since.as_unix_millis()).max(0) as u64;
        let b = (self.bucket.as_millis() as u64).max(1);
        span.div_ceil(b)
    }

    /// The bucket an attempt finished at `at` falls in; `None` outside the range.
    pub fn index_of(&self, at: Timestamp) -> Option<usize> {
        if at < self.since || at >= self.until {
            return None;
        }
        let off = at.as_unix_millis() - self.since.as_unix_millis();
        Some((off / self.bucket_millis().max(1)) as usize)
    }

    /// Empty buckets for the range.
    pub fn empty_buckets(&self) -> Vec<ActivityBucket> {
        (0..self.bucket_count())
            .map(|i| ActivityBucket {
                start: Timestamp::from_unix_millis_clamped(
                    self.since.as_unix_millis() + i as i64 * self.bucket_millis(),
                ),
                ..ActivityBucket::empty(self.since)
            })
            .collect()
    }

    /// Count attempts into buckets: the counting every store reproduces. Each item is one
    /// attempt of the tenant (and endpoint) with its [`ActivityKind`].
    pub fn tally(
        &self,
        attempts: impl IntoIterator<Item = ActivityAttempt>,
    ) -> Vec<ActivityBucket> {
        let mut out = self.empty_buckets();
        for a in attempts {
            if let Some(b) = self.index_of(a.finished_at).and_then(|i| out.get_mut(i)) {
                b.add(&a);
            }
        }
        out
    }
}

/// How an attempt counts in the activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivityKind {
    /// It succeeded.
    Succeeded,
    /// It failed, and the delivery went on (a retry, a hold, a later run).
    Failed,
    /// It failed and was the last attempt of a delivery that is now `dead`.
    Dead,
}

impl ActivityKind {
    /// The kind of an attempt with `outcome`; `last_of_dead` when it is the last attempt
    /// of a delivery that is now `dead`.
    pub fn of(outcome: AttemptOutcome, last_of_dead: bool) -> Self {
        match outcome {
            AttemptOutcome::Succeeded => ActivityKind::Succeeded,
            AttemptOutcome::Failed(_) if last_of_dead => ActivityKind::Dead,
            AttemptOutcome::Failed(_) => ActivityKind::Failed,
        }
    }
}

/// One attempt as the activity counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActivityAttempt {
    /// When it finished.
    pub finished_at: Timestamp,
    /// How it counts.
    pub kind: ActivityKind,
    /// `finished_at - started_at` in milliseconds.
    pub millis: u64,
}

/// One bucket of activity: attempts finished in `[start, start + bucket)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityBucket {
    /// The bucket's start.
    pub start: Timestamp,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed and were followed by more (retry, hold, replay).
    pub failed: u64,
    /// Attempts that failed and ended a delivery that is now dead.
    pub dead: u64,
    /// The sum of the successful attempts' durations, in milliseconds.
    pub latency_total_ms: u64,
    /// The longest successful attempt, in milliseconds (0 without one).
    pub latency_max_ms: u64,
}

impl ActivityBucket {
    /// A bucket starting at `start` with nothing counted.
    pub fn empty(start: Timestamp) -> Self {
        ActivityBucket {
            start,
            succeeded: 0,
            failed: 0,
            dead: 0,
            latency_total_ms: 0,
            latency_max_ms: 0,
        }
    }

    /// Count one attempt.
    pub fn add(&mut self, a: &ActivityAttempt) {
        match a.kind {
            ActivityKind::Succeeded => {
                self.succeeded += 1;
                self.latency_total_ms += a.millis;
                self.latency_max_ms = self.latency_max_ms.max(a.millis);
            }
            ActivityKind::Failed => self.failed += 1,
            ActivityKind::Dead => self.dead += 1,
        }
    }

    /// Every attempt counted.
    pub fn attempts(&self) -> u64 {
        self.succeeded + self.failed + self.dead
    }

    /// The mean duration of the successful attempts, in whole milliseconds.
    pub fn latency_mean_ms(&self) -> Option<u64> {
        (self.succeeded > 0).then(|| self.latency_total_ms / self.succeeded)
    }
}

/// The console's and admin API's records beside the outbox: the audit log, console
/// sessions and activity.
///
/// # Contract
/// - An audit entry read back MUST equal what was written; `list_audit` MUST be newest
///   first by `(at, id)`, paged with a stable cursor (`audit_lists_newest_first_with_stable_cursor`).
/// - `list_audit(Some(t))` MUST return only `t`'s entries, `list_audit(None)` every entry,
///   admin-scope ones included (`audit_is_scoped_by_tenant`).
/// - `record_audit` of an invalid entry MUST be `InvalidInput`, of an existing id
///   `Conflict`, and write nothing; a bad limit MUST be `InvalidInput`
///   (`audit_refuses_bad_entries`).
/// - `purge_audit` MUST remove only entries before the cutoff, oldest first, at most
///   `limit` per call (`audit_purge_removes_only_older_entries`).
/// - A session read back MUST equal what was written; `delete_session` MUST end it
///   (`sessions_round_trip_and_delete`).
/// - `get_session` MUST NOT return a session at or past its expiry, and `put_session`
///   MUST remove expired ones (`sessions_expire`).
/// - A token MUST keep at most [`MAX_SESSIONS_PER_TOKEN`] live sessions: a new one past
///   that ends the oldest by `(created_at, id_hash)`; other tokens' sessions stay
///   (`sessions_are_bounded_per_token`), and `delete_token_sessions` ends all of one
///   token's (`token_sessions_end_together`).
/// - `activity` MUST count every attempt of the tenant by finish time into its bucket
///   exactly as [`ActivityQuery::tally`] (`activity_counts_every_bucket`), only the
///   tenant's and, when asked, the endpoint's (`activity_is_scoped`), and refuse a range
///   [`ActivityQuery::validate`] refuses (`activity_refuses_unbounded_ranges`).
/// - The cases run with `outboxkit_testing::console_conformance_tests!`, apart from the
///   store's suite.
#[async_trait]
pub trait ConsoleStore: Send + Sync + fmt::Debug + 'static {
    /// Append one audit entry.
    ///
    /// # Cancel safety
    /// All or nothing; a retry after a write that landed is a `Conflict`.
    async fn record_audit(&self, entry: &AuditEntry) -> Result<()>;
    /// A page of the audit log, newest first: one tenant's entries, or with `None` every
    /// entry (the admin's view). `limit` is 1–1000.
    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage>;
    /// Remove entries before `before`, oldest first, at most `limit` (1–10000); returns how
    /// many.
    ///
    /// # Cancel safety
    /// Cancel safe: call again to remove what is left.
    async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64>;
    /// Keep a new session (or replace the one with its hash), removing expired sessions at
    /// `now` and the token's oldest past [`MAX_SESSIONS_PER_TOKEN`].
    async fn put_session(&self, session: &ConsoleSession, now: Timestamp) -> Result<()>;
    /// The live session with this hash at `now`.
    async fn get_session(
        &self,
        id_hash: &[u8; 32],
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>>;
    /// End one session; whether it existed.
    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool>;
    /// End every session of a token (at revocation); how many.
    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64>;
    /// Attempts of the tenant finished in `[since, until)`, counted by bucket.
    async fn activity(&self, query: &ActivityQuery) -> Result<Vec<ActivityBucket>>;
}

/// `dyn ConsoleStore`.
pub type DynConsoleStore = dyn ConsoleStore;

macro_rules! forward {
    ($ptr:ident) => {
        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: ConsoleStore + ?Sized> ConsoleStore for $ptr<T> {
            async fn record_audit(&self, entry: &AuditEntry) -> Result<()> {
                (**self).record_audit(entry).await
            }
            async fn list_audit(
                &self,
                tenant: Option<&TenantId>,
                limit: u32,
                after: Option<AuditCursor>,
            ) -> Result<AuditPage> {
                (**self).list_audit(tenant, limit, after).await
            }
            async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64> {
                (**self).purge_audit(before, limit).await
            }
            async fn put_session(&self, session: &ConsoleSession, now: Timestamp) -> Result<()> {
                (**self).put_session(session, now).await
            }
            async fn get_session(
                &self,
                id_hash: &[u8; 32],
                now: Timestamp,
            ) -> Result<Option<ConsoleSession>> {
                (**self).get_session(id_hash, now).await
            }
            async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
                (**self).delete_session(id_hash).await
            }
            async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
                (**self).delete_token_sessions(token).await
            }
            async fn activity(&self, query: &ActivityQuery) -> Result<Vec<ActivityBucket>> {
                (**self).activity(query).await
            }
        }
    };
}

forward!(Arc);
forward!(Box);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorClass;

    fn ts(ms: i64) -> Timestamp {
        Timestamp::from_unix_millis(ms).unwrap()
    }

    fn query(since: i64, until: i64, bucket: u64) -> ActivityQuery {
        ActivityQuery {
            tenant: TenantId::new("acme").unwrap(),
            endpoint: None,
            since: ts(since),
            until: ts(until),
            bucket: Duration::from_secs(bucket),
        }
    }

    #[test]
    fn ranges_are_bounded() {
        let day = 24 * 3600 * 1000;
        assert!(query(0, day, 60).validate().is_ok());
        assert!(query(0, day + 1, 60).validate().is_err());
        assert!(query(0, day, 59).validate().is_err());
        assert!(query(10, 10, 60).validate().is_err());
        let mut q = query(0, 1000, 1);
        q.bucket = Duration::from_millis(1500);
        assert!(q.validate().is_err());
    }

    #[test]
    fn attempts_fall_in_their_bucket() {
        let q = query(0, 150_000, 60);
        assert_eq!(q.bucket_count(), 3);
        let a = |ms, kind, millis| ActivityAttempt {
            finished_at: ts(ms),
            kind,
            millis,
        };
        let out = q.tally([
            a(0, ActivityKind::Succeeded, 10),
            a(59_999, ActivityKind::Succeeded, 30),
            a(60_000, ActivityKind::Failed, 5),
            a(149_999, ActivityKind::Dead, 5),
            a(150_000, ActivityKind::Succeeded, 5),
        ]);
        assert_eq!(out[0].succeeded, 2);
        assert_eq!(out[0].latency_mean_ms(), Some(20));
        assert_eq!(out[0].latency_max_ms, 30);
        assert_eq!((out[1].failed, out[1].attempts()), (1, 1));
        assert_eq!((out[2].dead, out[2].start), (1, ts(120_000)));
        let f = AttemptOutcome::Failed(ErrorClass::Timeout);
        assert_eq!(ActivityKind::of(f, true), ActivityKind::Dead);
        assert_eq!(ActivityKind::of(f, false), ActivityKind::Failed);
    }
}
