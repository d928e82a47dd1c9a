//! [`ConsoleStore`] for the in-memory store: the audit log and sessions beside the delivery
//! state, activity counted from the ledger's attempts.

use std::sync::PoisonError;

use async_trait::async_trait;
use outboxkit_core::audit::{AuditCursor, AuditEntry, AuditPage};
use outboxkit_core::console_memory::ConsoleMemory;
use outboxkit_core::console_store::{ActivityAttempt, ActivityKind};
use outboxkit_core::{
    ActivityBucket, ActivityQuery, ConsoleSession, ConsoleStore, DeliveryStatus, Result, TenantId,
    Timestamp, TokenId,
};

use super::InMemoryStore;

/// The audit log and the sessions: core's in-memory rules, unbounded.
pub(super) type Console = ConsoleMemory;

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
        self.console().record_audit(entry)
    }

    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        self.console().list_audit(tenant, limit, after)
    }

    async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64> {
        self.console().purge_audit(before, limit)
    }

    async fn put_session(&self, session: &ConsoleSession, now: Timestamp) -> Result<()> {
        self.console().put_session(session, now)
    }

    async fn get_session(
        &self,
        id_hash: &[u8; 32],
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>> {
        Ok(self.console().get_session(id_hash, now))
    }

    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
        Ok(self.console().delete_session(id_hash))
    }

    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
        Ok(self.console().delete_token_sessions(token))
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
