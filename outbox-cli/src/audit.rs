//! The console store of an opened store (sessions and audit log for `outbox serve`), and
//! the audit entries of the CLI's own changes (actor `cli`, with the OS user when known).

use std::sync::Arc;

use outboxkit_core::{AuditEntry, DynConsoleStore, TenantId};

use crate::store::{Backend, Env};

/// The store's [`outboxkit_core::ConsoleStore`].
pub fn console_store(env: &Env) -> Arc<DynConsoleStore> {
    match &env.backend {
        Backend::Sqlite(s) => Arc::new(s.clone()),
        Backend::Postgres(s) => Arc::new(s.clone()),
        Backend::Redis(s) => Arc::new(s.clone()),
    }
}

/// `cli`, or `cli (<user>)` from `$USER`/`$USERNAME`.
fn actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .ok()
        .map(|u| outboxkit_core::audit::clean(&u, 64))
        .filter(|u| !u.is_empty());
    match user {
        Some(u) => format!("cli ({u})"),
        None => "cli".to_owned(),
    }
}

/// Record a change the CLI made. A failure to record is reported on stderr, not as the
/// command's failure: the change itself is done.
pub async fn record(
    env: &Env,
    tenant: Option<&TenantId>,
    action: &str,
    target: &str,
    detail: String,
) {
    let entry = AuditEntry::new(
        env.clock.now(),
        &*env.entropy,
        tenant.cloned(),
        actor(),
        action,
        outboxkit_core::audit::clean(target, outboxkit_core::audit::MAX_AUDIT_FIELD),
    )
    .with_detail(detail);
    if let Err(e) = console_store(env).record_audit(&entry).await {
        eprintln!("warning: could not record the change in the audit log: {e}");
    }
}
