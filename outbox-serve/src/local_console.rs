//! The console store `outbox serve` falls back to without [`crate::Serve::with_console_store`]:
//! sessions and the audit log in this process only (lost at a restart), bounded, and no
//! activity (it has no ledger to count).

use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use outboxkit_core::audit::{AuditCursor, AuditEntry, AuditPage};
use outboxkit_core::console_memory::ConsoleMemory;
use outboxkit_core::{
    ActivityBucket, ActivityQuery, ConsoleSession, ConsoleStore, Error, Result, TenantId,
    Timestamp, TokenId,
};

/// The most audit entries and sessions kept in process.
const CAP: usize = 10_000;

/// Sessions and the audit log in memory.
#[derive(Debug)]
pub(crate) struct LocalConsole(Mutex<ConsoleMemory>);

impl Default for LocalConsole {
    fn default() -> Self {
        LocalConsole(Mutex::new(ConsoleMemory::bounded(CAP)))
    }
}

impl LocalConsole {
    fn lock(&self) -> std::sync::MutexGuard<'_, ConsoleMemory> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ConsoleStore for LocalConsole {
    async fn record_audit(&self, entry: &AuditEntry) -> Result<()> {
        self.lock().record_audit(entry)
    }

    async fn list_audit(
        &self,
        tenant: Option<&TenantId>,
        limit: u32,
        after: Option<AuditCursor>,
    ) -> Result<AuditPage> {
        self.lock().list_audit(tenant, limit, after)
    }

    async fn purge_audit(&self, before: Timestamp, limit: u32) -> Result<u64> {
        self.lock().purge_audit(before, limit)
    }

    async fn put_session(&self, session: &ConsoleSession, now: Timestamp) -> Result<()> {
        self.lock().put_session(session, now)
    }

    async fn get_session(
        &self,
        id_hash: &[u8; 32],
        now: Timestamp,
    ) -> Result<Option<ConsoleSession>> {
        Ok(self.lock().get_session(id_hash, now))
    }

    async fn delete_session(&self, id_hash: &[u8; 32]) -> Result<bool> {
        Ok(self.lock().delete_session(id_hash))
    }

    async fn delete_token_sessions(&self, token: TokenId) -> Result<u64> {
        Ok(self.lock().delete_token_sessions(token))
    }

    async fn activity(&self, _query: &ActivityQuery) -> Result<Vec<ActivityBucket>> {
        Err(Error::misconfigured(
            "console_store",
            "activity needs the store's console records: start the server with a console store",
        ))
    }
}
