//! The webhook channel: gate a delivery on its endpoint's status, read endpoints and open
//! their secrets once per batch, forward the trace context. The signed request itself is
//! built by `outboxkit_core::webhook_request` (re-exported here).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use outboxkit_core::endpoint::{Endpoint, EndpointStatus};
use outboxkit_core::error::Result;
use outboxkit_core::ids::{EndpointId, TenantId};
use outboxkit_core::model::Message;
use outboxkit_core::signing::SigningKey;
use outboxkit_core::store::DynStore;
use outboxkit_core::transport::SignedRequest;
use outboxkit_core::vault::DynSecretVault;
use outboxkit_core::verdict::Outcome;
pub use outboxkit_core::webhook_request::{
    open_secrets, signed_request, signed_request_keyed, webhook_body,
};

use crate::DispatcherConfig;

/// Add the message's `traceparent` header to the request when
/// [`DispatcherConfig::forward_traceparent`] is set (it is not signed: it describes the
/// sender's trace, not the event).
pub fn forward_traceparent(
    mut request: SignedRequest,
    message: &Message,
    config: &DispatcherConfig,
) -> SignedRequest {
    if config.forward_traceparent {
        if let Some(tp) = outboxkit_core::Traceparent::from_headers(&message.headers) {
            request
                .headers
                .push((outboxkit_core::TRACEPARENT.to_owned(), tp.to_string()));
        }
    }
    request
}

/// The outcome when an endpoint cannot receive (missing, paused, disabled), else `None`.
pub fn endpoint_gate(endpoint: Option<&Endpoint>) -> Option<Outcome> {
    match endpoint.map(|e| &e.status) {
        None => Some(Outcome::EndpointMissing),
        Some(EndpointStatus::Paused) => Some(Outcome::EndpointPaused),
        Some(EndpointStatus::Disabled(_)) => Some(Outcome::EndpointDisabled),
        Some(EndpointStatus::Active) => None,
    }
}

/// Endpoint reads shared by the deliveries of one claim batch: a batch claimed after a
/// secret rotation or URL change always reads the endpoint afresh. Single-flight: the
/// deliveries of one batch to one endpoint wait for one read rather than each reading it
/// (a failed read is not kept: the next delivery tries again). The endpoint's secrets are
/// opened and keyed for HMAC once per batch the same way, from the endpoint read for that
/// batch.
#[derive(Debug, Default)]
pub(crate) struct EndpointCache {
    entries: Mutex<HashMap<(TenantId, EndpointId), Arc<EndpointRead>>>,
    secrets: Mutex<HashMap<(TenantId, EndpointId), Arc<SecretsOpened>>>,
}

/// One endpoint read of a batch (`None`: the endpoint does not exist).
type EndpointRead = OnceCell<Option<Endpoint>>;

/// The secrets of one endpoint, opened and keyed once for a batch.
type SecretsOpened = OnceCell<Arc<Vec<SigningKey>>>;

impl EndpointCache {
    pub(crate) async fn get(
        &self,
        store: &DynStore,
        tenant: &TenantId,
        id: EndpointId,
    ) -> Result<Option<Endpoint>> {
        let cell = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((tenant.clone(), id))
            .or_default()
            .clone();
        let read = cell
            .get_or_try_init(|| async {
                match store.get_endpoint(tenant, id).await {
                    Ok(e) => Ok(Some(e)),
                    Err(e) if e.is_not_found() => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(read.clone())
    }

    /// `endpoint`'s secrets (current, then previous), opened through `vault` and keyed once
    /// for the deliveries started together; a failure is not kept (the next delivery tries
    /// again).
    pub(crate) async fn secrets(
        &self,
        vault: &DynSecretVault,
        endpoint: &Endpoint,
    ) -> Result<Arc<Vec<SigningKey>>> {
        let cell = self
            .secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((endpoint.tenant.clone(), endpoint.id))
            .or_default()
            .clone();
        let opened = cell
            .get_or_try_init(|| async {
                let secrets = open_secrets(vault, endpoint).await?;
                Ok::<_, outboxkit_core::Error>(Arc::new(
                    secrets.iter().map(SigningKey::new).collect(),
                ))
            })
            .await?;
        Ok(opened.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboxkit_core::endpoint::{BodyFormat, EndpointUrl, SealedSecret};
    use outboxkit_core::ids::TopicFilter;
    use outboxkit_core::time::Timestamp;

    fn endpoint() -> Endpoint {
        let t = Timestamp::from_unix_millis(1_700_000_000_000).unwrap();
        Endpoint {
            id: EndpointId::parse("01900000-0000-7000-8000-0000000000aa").unwrap(),
            tenant: TenantId::default(),
            url: EndpointUrl::parse("https://hooks.example/x").unwrap(),
            description: String::new(),
            filter: TopicFilter::all(),
            status: EndpointStatus::Active,
            secret: SealedSecret(vec![]),
            previous_secret: None,
            body_format: BodyFormat::Envelope,
            rate_limit: None,
            last_delivery: None,
            created_at: t,
            updated_at: t,
        }
    }

    #[test]
    fn gates() {
        let mut e = endpoint();
        assert_eq!(endpoint_gate(None), Some(Outcome::EndpointMissing));
        assert_eq!(endpoint_gate(Some(&e)), None);
        e.status = EndpointStatus::Paused;
        assert_eq!(endpoint_gate(Some(&e)), Some(Outcome::EndpointPaused));
        e.status = EndpointStatus::Disabled(outboxkit_core::endpoint::DisabledReason::Gone);
        assert_eq!(endpoint_gate(Some(&e)), Some(Outcome::EndpointDisabled));
    }
}
