//! A console store that is always unavailable, for the 503 answers of the audit routes.

/// A console store that is always unavailable, beside the faulty store.
#[derive(Debug)]
pub(crate) struct DownConsole;

fn down<T>() -> outboxkit_core::Result<T> {
    Err(outboxkit_core::Error::new(
        outboxkit_core::ErrorKind::Unavailable,
        "the console store is down",
    ))
}

#[outboxkit_core::async_trait]
impl outboxkit_core::ConsoleStore for DownConsole {
    async fn record_audit(&self, _: &outboxkit_core::AuditEntry) -> outboxkit_core::Result<()> {
        down()
    }
    async fn list_audit(
        &self,
        _: Option<&outboxkit_core::TenantId>,
        _: u32,
        _: Option<outboxkit_core::AuditCursor>,
    ) -> outboxkit_core::Result<outboxkit_core::AuditPage> {
        down()
    }
    async fn purge_audit(
        &self,
        _: outboxkit_core::Timestamp,
        _: u32,
    ) -> outboxkit_core::Result<u64> {
        down()
    }
    async fn put_session(
        &self,
        _: &outboxkit_core::ConsoleSession,
        _: outboxkit_core::Timestamp,
    ) -> outboxkit_core::Result<()> {
        down()
    }
    async fn get_session(
        &self,
        _: &[u8; 32],
        _: outboxkit_core::Timestamp,
    ) -> outboxkit_core::Result<Option<outboxkit_core::ConsoleSession>> {
        down()
    }
    async fn delete_session(&self, _: &[u8; 32]) -> outboxkit_core::Result<bool> {
        down()
    }
    async fn delete_token_sessions(
        &self,
        _: outboxkit_core::TokenId,
    ) -> outboxkit_core::Result<u64> {
        down()
    }
    async fn activity(
        &self,
        _: &outboxkit_core::ActivityQuery,
    ) -> outboxkit_core::Result<Vec<outboxkit_core::ActivityBucket>> {
        down()
    }
}
