//! [`ConsoleMemory`]: the audit log and console sessions held in memory, with the
//! [`ConsoleStore`](crate::ConsoleStore) rules (order, cursor, per-token bound, expiry), for
//! the stores that keep them in process: the in-memory store and `outbox serve`'s fallback.

use std::collections::{BTreeMap, HashMap};

use crate::audit::{check_audit_limit, AuditCursor, AuditEntry, AuditPage};
use crate::console_store::{ConsoleSession, MAX_SESSIONS_PER_TOKEN};
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{AuditId, TenantId, TokenId};
use crate::store::check_purge_limit;
use crate::time::Timestamp;

/// The audit log (by `(at, id)`) and the sessions (by hash), optionally bounded in total.
#[derive(Debug, Default)]
pub struct ConsoleMemory {
    audit: BTreeMap<(Timestamp, AuditId), AuditEntry>,
    sessions: HashMap<[u8; 32], ConsoleSession>,
    /// At most this many audit entries and sessions each (oldest dropped first); `None`:
    /// unbounded.
    cap: Option<usize>,
}

impl ConsoleMemory {
    /// Keep at most `cap` audit entries and `cap` sessions, dropping the oldest first.
    pub fn bounded(cap: usize) -> Self {
        ConsoleMemory {
            cap: Some(cap),
            ..ConsoleMemory::default()
        }
    }

    /// [`ConsoleStore::record_audit`](crate::ConsoleStore::record_audit).
    pub fn record_audit(&mut self, entry: &AuditEntry) -> Result<()> {
        entry.validate()?;
        if self.audit.values().any(|e| e.id == entry.id) {
            return Err(Error::new(ErrorKind::Conflict, "the audit entry exists"));
        }
        self.audit.insert((entry.at, entry.id), entry.clone());
        while self.cap.is_some_and(|cap| self.audit.len() > cap) {
            self.audit.pop_first();
        }
        Ok(())
    }

    /// [`ConsoleStore::list_audit`](crate::ConsoleStore::list_audit).
    pub fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        check_audit_limit(limit)?;
        let sorted = self
            .audit
            .values()
            .rev()
            .filter(|e| tenant.is_none_or(|t| e.tenant.as_ref() == Some(t)))
            .filter(|e| after.is_none_or(|a| a.precedes(e)))
            .take(limit as usize + 1)
            .cloned()
            .collect();
        Ok(AuditPage::from_sorted(sorted, limit))
    }

    /// [`ConsoleStore::purge_audit`](crate::ConsoleStore::purge_audit).
    pub fn purge_audit(&mut self, before: Timestamp, limit: u32) -> Result<u64> {
        check_purge_limit(limit)?;
        let old: Vec<(Timestamp, AuditId)> = self
            .audit
            .keys()
            .take_while(|(at, _)| *at < before)
            .take(limit as usize)
            .copied()
            .collect();
        for k in &old {
            self.audit.remove(k);
        }
        Ok(old.len() as u64)
    }

    /// [`ConsoleStore::put_session`](crate::ConsoleStore::put_session): expired sessions
    /// go, and past [`MAX_SESSIONS_PER_TOKEN`] the token's oldest.
    pub fn put_session(&mut self, session: &ConsoleSession, now: Timestamp) -> Result<()> {
        session.validate()?;
        self.sessions.retain(|_, s| s.live_at(now));
        self.sessions.insert(session.id_hash, session.clone());
        let mut mine: Vec<(Timestamp, [u8; 32])> = self
            .sessions
            .values()
            .filter(|s| s.token == session.token)
            .map(|s| (s.created_at, s.id_hash))
            .collect();
        mine.sort();
        let over = mine.len().saturating_sub(MAX_SESSIONS_PER_TOKEN);
        for (_, h) in &mine[..over] {
            self.sessions.remove(h);
        }
        while self.cap.is_some_and(|cap| self.sessions.len() > cap) {
            let oldest = self
                .sessions
                .values()
                .min_by_key(|s| (s.created_at, s.id_hash))
                .map(|s| s.id_hash);
            match oldest {
                Some(h) => self.sessions.remove(&h),
                None => break,
            };
        }
        Ok(())
    }

    /// [`ConsoleStore::get_session`](crate::ConsoleStore::get_session).
    pub fn get_session(&self, id_hash: &[u8; 32], now: Timestamp) -> Option<ConsoleSession> {
        self.sessions
            .get(id_hash)
            .filter(|s| s.live_at(now))
            .cloned()
    }

    /// [`ConsoleStore::delete_session`](crate::ConsoleStore::delete_session).
    pub fn delete_session(&mut self, id_hash: &[u8; 32]) -> bool {
        self.sessions.remove(id_hash).is_some()
    }

    /// [`ConsoleStore::delete_token_sessions`](crate::ConsoleStore::delete_token_sessions).
    pub fn delete_token_sessions(&mut self, token: TokenId) -> u64 {
        let before = self.sessions.len();
        self.sessions.retain(|_, s| s.token != token);
        (before - self.sessions.len()) as u64
    }
}
