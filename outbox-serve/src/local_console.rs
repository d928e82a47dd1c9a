//! The console store `outbox serve` falls back to without [`crate::Serve::with_console_store`]:
//! sessions and the audit log in this process only (lost at a restart), bounded, and no
//! activity (it has no ledger to count).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use outboxkit_core::audit::{check_audit_limit, AuditCursor, AuditEntry, AuditPage};
use outboxkit_core::console_store::MAX_SESSIONS_PER_TOKEN;
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::{
    ActivityBucket, ActivityQuery, AuditId, ConsoleSession, ConsoleStore, Error, ErrorKind, Result,
    TenantId, Timestamp, TokenId,
};

/// The most audit entries and sessions kept in process.
const CAP: usize = 10_000;

#[derive(Debug, Default)]
struct State {
    audit: BTreeMap<(Timestamp, AuditId), AuditEntry>,
    sessions: HashMap<[u8; 32], ConsoleSession>,
}

/// Sessions and the audit log in memory.
#[derive(Debug, Default)]
pub(crate) struct LocalConsole(Mutex<State>);

impl LocalConsole {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ConsoleStore for LocalConsole {
    async fn record_audit(&self, entry: &AuditEntry) -> Result<()> {
        entry.validate()?;
        let mut s = self.lock();
        if s.audit.values().any(|e| e.id == entry.id) {
            return Err(Error::new(ErrorKind::Conflict, "the audit entry exists"));
        }
        s.audit.insert((entry.at, entry.id), entry.clone());
        while s.audit.len() > CAP {
            s.audit.pop_first();
        }
        Ok(())
    }

    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        check_audit_limit(limit)?;
        let s = self.lock();
        let sorted = s
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

    async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64> {
        check_purge_limit(limit)?;
        let mut s = self.lock();
        let old: Vec<_> = s
            .audit
            .keys()
            .take_while(|(at, _)| *at < before)
            .take(limit as usize)
            .copied()
            .collect();
        for k in &old {
            s.audit.remove(k);
        }
        Ok(old.len() as u64)
    }

    async fn put_session(&self, session: &ConsoleSession, now: Timestamp) -> Result<()> {
        session.validate()?;
        let mut s = self.lock();
        s.sessions.retain(|_, x| x.live_at(now));
        s.sessions.insert(session.id_hash, session.clone());
        let mut mine: Vec<_> = s
            .sessions
            .values()
            .filter(|x| x.token == session.token)
            .map(|x| (x.created_at, x.id_hash))
            .collect();
        mine.sort();
        let over = mine.len().saturating_sub(MAX_SESSIONS_PER_TOKEN);
        for (_, h) in &mine[..over] {
            s.sessions.remove(h);
        }
        if s.sessions.len() > CAP {
            let oldest = s
                .sessions
                .values()
                .min_by_key(|x| (x.created_at, x.id_hash));
            if let Some(h) = oldest.map(|x| x.id_hash) {
                s.sessions.remove(&h);
            }
        }
        Ok(())
    }

    async fn get_session(
        &self,
        id_hash: &[u8; 32],
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>> {
        Ok(self
            .lock()
            .sessions
            .get(id_hash)
            .filter(|x| x.live_at(now))
            .cloned())
    }

    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
        Ok(self.lock().sessions.remove(id_hash).is_some())
    }

    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
        let mut s = self.lock();
        let before = s.sessions.len();
        s.sessions.retain(|_, x| x.token != token);
        Ok((before - s.sessions.len()) as u64)
    }

    async fn activity(&self, _query: &ActivityQuery) -> Result<Vec<ActivityBucket>> {
        Err(Error::misconfigured(
            "console_store",
            "activity needs the store's console records: start the server with a console store",
        ))
    }
}
