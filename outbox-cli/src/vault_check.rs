//! The relay's vault at start-up: a key is demanded only when there are endpoint secrets to
//! open, and a key that opens none of them is a configuration fault reported before
//! anything is claimed (instead of parking every webhook delivery).

use std::sync::Arc;

use async_trait::async_trait;
use outboxkit_core::{
    DynSecretVault, Endpoint, Error, ErrorKind, SealedSecret, SecretContext, SecretVault, TenantId,
};

use crate::error::{CliError, CliResult};
use crate::store::{vault_from, Env};

/// The most endpoints whose secret the start-up check tries to open.
const TRIED: usize = 16;

/// The vault the relay signs with. Without a key and with no endpoint in the store (a relay
/// that only sends e-mail or publishes to a broker), a vault that opens nothing: a webhook
/// endpoint added later is parked until the relay is restarted with the key. With endpoints
/// and no key, the usual "set OUTBOX_VAULT_KEY" error. With a key that opens none of the
/// endpoint secrets tried (the first endpoint of each tenant, at most 16), a configuration
/// error naming the endpoint tried (never a secret), exit code 2.
pub async fn relay_vault(env: &Env) -> CliResult<Arc<DynSecretVault>> {
    let tried = endpoints_to_try(env).await?;
    if env.vault_key.is_none() && tried.is_empty() {
        tracing::info!(
            "no vault key given and no webhook endpoint in the store: webhook deliveries cannot be signed until the relay runs with OUTBOX_VAULT_KEY"
        );
        return Ok(Arc::new(NoKey));
    }
    let vault = vault_from(env)?;
    if tried.is_empty() {
        return Ok(vault);
    }
    for e in &tried {
        if outboxkit_dispatch::open_secrets(&*vault, e).await.is_ok() {
            return Ok(vault);
        }
    }
    let first = &tried[0];
    Err(CliError::usage(format!(
        "configuration error: the vault key opens none of the {} endpoint secrets tried (first: endpoint {} of tenant {}): it is not the key they were sealed with; set OUTBOX_VAULT_KEY (or --vault-key) to that key",
        tried.len(),
        first.id,
        first.tenant
    )))
}

/// The first endpoint of each tenant the store knows (and of `default`), at most [`TRIED`].
async fn endpoints_to_try(env: &Env) -> CliResult<Vec<Endpoint>> {
    let mut tenants = vec![TenantId::default()];
    for t in env.store.tenants().await? {
        if !tenants.contains(&t.tenant) {
            tenants.push(t.tenant);
        }
    }
    let mut out = Vec::new();
    for t in tenants {
        if let Some(e) = env.store.list_endpoints(&t).await?.into_iter().next() {
            out.push(e);
            if out.len() == TRIED {
                break;
            }
        }
    }
    Ok(out)
}

/// The vault of a relay started without a key: it opens and seals nothing.
#[derive(Debug)]
struct NoKey;

#[async_trait]
impl SecretVault for NoKey {
    async fn seal(&self, _: &[u8], _: &SecretContext) -> outboxkit_core::Result<SealedSecret> {
        Err(no_key())
    }

    async fn open(&self, _: &SealedSecret, _: &SecretContext) -> outboxkit_core::Result<Vec<u8>> {
        Err(no_key())
    }
}

fn no_key() -> Error {
    Error::new(
        ErrorKind::Misconfigured,
        "the relay runs without a vault key: restart it with OUTBOX_VAULT_KEY to sign webhooks",
    )
}
