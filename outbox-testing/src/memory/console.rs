//! [`ConsoleStore`] for the in-memory store: the audit log and sessions beside the delivery
//! state, activity counted from the ledger's attempts.

use std::collections::{BTreeMap, HashMap};
use std::sync::PoisonError;

use async_trait::async_trait;
use outboxkit_core::audit::{check_audit_limit, AuditCursor, AuditEntry, AuditPage};
use outboxkit_core::console_store::{ActivityAttempt, ActivityKind, MAX_SESSIONS_PER_TOKEN};
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::{
    ActivityBucket, ActivityQuery, AuditId, ConsoleSession, ConsoleStore, DeliveryStatus, Error,
    ErrorKind, Result, TenantId, Timestamp, TokenId,
};

use super::InMemoryStore;

/// The audit log (by `(at, id)`) and the sessions (by hash).
#[derive(Debug, Default)]
pub(super) struct Console {
    audit: BTreeMap<(Timestamp, AuditId), AuditEntry>,
    sessions: HashMap<[u8; 32], ConsoleSession>,
}

impl InMemoryStore {
    fn console(&self) -> std::sync::MutexGuard<'_, Console> {
        self.shared
            .console
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ConsoleStore for InMemoryStore {
    async fn record_audit(&self, entry: &AuditEntry) -> Result<()> {
        entry.validate()?;
        let mut c = self.console();
        if c.audit.values().any(|e| e.id == entry.id) {
            return Err(Error::new(ErrorKind::Conflict, "the audit entry exists"));
        }
        c.audit.insert((entry.at, entry.id), entry.clone());
        Ok(())
    }

    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        check_audit_limit(limit)?;
        let c = self.console();
        let sorted: Vec<AuditEntry> = c
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
        let mut c = self.console();
        let old: Vec<(Timestamp, AuditId)> = c
            .audit
            .keys()
            .take_while(|(at, _)| *at < before)
            .take(limit as usize)
            .copied()
            .collect();
        for k in &old {
            c.audit.remove(k);
        }
        Ok(old.len() as u64)
    }

    async fn put_session(&self, session: &ConsoleSession, now: Timestamp) -> Result<()> {
        session.validate()?;
        let mut c = self.console();
        c.sessions.retain(|_, s| s.live_at(now));
        c.sessions.insert(session.id_hash, session.clone());
        let mut mine: Vec<(Timestamp, [u8; 32])> = c
            .sessions
            .values()
            .filter(|s| s.token == session.token)
            .map(|s| (s.created_at, s.id_hash))
            .collect();
        if mine.len() > MAX_SESSIONS_PER_TOKEN {
            mine.sort();
            for (_, h) in &mine[..mine.len() - MAX_SESSIONS_PER_TOKEN] {
                c.sessions.remove(h);
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
            .console()
            .sessions
            .get(id_hash)
            .filter(|s| s.live_at(now))
            .cloned())
    }

    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
        Ok(self.console().sessions.remove(id_hash).is_some())
    }

    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
        let mut c = self.console();
        let before = c.sessions.len();
        c.sessions.retain(|_, s| s.token != token);
        Ok((before - c.sessions.len()) as u64)
    }

    async fn activity(&self, query: &ActivityQuery) -> Result<Vec<ActivityBucket>> {
        query.validate()?;
        let state = self.lock();
        let mut counted = Vec::new();
        for row in state.rows.values() {
            let d = &row.d;
            if d.tenant != query.tenant
                || query
                    .endpoint
                    .is_some_and(|e| d.destination.endpoint() != Some(e))
            {
                continue;
            }
            let Some(list) = state.attempts.get(&d.id) else {
                continue;
            };
            let last = list.iter().map(|a| a.number).max();
            for a in list {
                let last_of_dead = d.status == DeliveryStatus::Dead && Some(a.number) == last;
                counted.push(ActivityAttempt {
                    finished_at: a.record.finished_at,
                    kind: ActivityKind::of(a.record.outcome, last_of_dead),
                    millis: a.duration().as_millis() as u64,
                });
            }
        }
        Ok(query.tally(counted))
    }
}
