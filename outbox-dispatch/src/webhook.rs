//! The webhook channel: build the signed request of a delivery and classify its answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::Duration;
use tokio::sync::OnceCell;

use outboxkit_core::endpoint::{BodyFormat, Endpoint, EndpointStatus};
use outboxkit_core::error::Result;
use outboxkit_core::ids::{DeliveryId, EndpointId, TenantId};
use outboxkit_core::model::{Envelope, Message};
use outboxkit_core::signing::{sign_with, HeaderNames, WebhookSecret};
use outboxkit_core::store::DynStore;
use outboxkit_core::time::Timestamp;
use outboxkit_core::transport::SignedRequest;
use outboxkit_core::vault::{DynSecretVault, SecretContext};
use outboxkit_core::verdict::Outcome;

use crate::DispatcherConfig;

/// The exact body sent for `message` to an endpoint with `format`.
pub fn webhook_body(message: &Message, format: BodyFormat) -> Vec<u8> {
    match format {
        BodyFormat::Envelope => Envelope::bytes_of(message),
        BodyFormat::Raw => message.payload.clone(),
    }
}

/// The signed request of one attempt: `webhook-id` is the delivery id (stable across
/// retries), `webhook-timestamp` this attempt's Unix seconds, `webhook-signature` one `v1`
/// signature per secret (current first).
pub fn signed_request(
    endpoint: &Endpoint,
    secrets: &[WebhookSecret],
    message: &Message,
    delivery: DeliveryId,
    now: Timestamp,
    names: &HeaderNames,
    timeout: Duration,
) -> SignedRequest {
    let body = webhook_body(message, endpoint.body_format);
    let id = delivery.to_string();
    // Written once: the header and the signed text are the same digits.
    let ts = now.as_unix_seconds().to_string();
    let signature = match secrets {
        [current] => sign_with(&[current], &id, &ts, &body),
        _ => sign_with(&secrets.iter().collect::<Vec<_>>(), &id, &ts, &body),
    };
    SignedRequest {
        url: endpoint.url.clone(),
        headers: vec![
            (names.id.clone(), id),
            (names.timestamp.clone(), ts),
            (names.signature.clone(), signature),
            ("content-type".to_owned(), "application/json".to_owned()),
        ],
        body,
        timeout,
    }
}

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

/// Open an endpoint's secrets (current, then previous) through the vault.
pub async fn open_secrets(
    vault: &DynSecretVault,
    endpoint: &Endpoint,
) -> Result<Vec<WebhookSecret>> {
    let ctx = SecretContext::endpoint(&endpoint.tenant, endpoint.id);
    let mut out = vec![WebhookSecret::from_bytes(
        vault.open(&endpoint.secret, &ctx).await?,
    )?];
    if let Some(prev) = &endpoint.previous_secret {
        out.push(WebhookSecret::from_bytes(vault.open(prev, &ctx).await?)?);
    }
    Ok(out)
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
/// opened once per batch the same way, from the endpoint read for that batch.
#[derive(Debug, Default)]
pub(crate) struct EndpointCache {
    entries: Mutex<HashMap<(TenantId, EndpointId), Arc<EndpointRead>>>,
    secrets: Mutex<HashMap<(TenantId, EndpointId), Arc<SecretsOpened>>>,
}

/// One endpoint read of a batch (`None`: the endpoint does not exist).
type EndpointRead = OnceCell<Option<Endpoint>>;

/// The secrets of one endpoint, opened once for a batch.
type SecretsOpened = OnceCell<Arc<Vec<WebhookSecret>>>;

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

    /// `endpoint`'s secrets (current, then previous), opened through `vault` once for the
    /// deliveries started together; a failure is not kept (the next delivery tries again).
    pub(crate) async fn secrets(
        &self,
        vault: &DynSecretVault,
        endpoint: &Endpoint,
    ) -> Result<Arc<Vec<WebhookSecret>>> {
        let cell = self
            .secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((endpoint.tenant.clone(), endpoint.id))
            .or_default()
            .clone();
        let opened = cell
            .get_or_try_init(|| async { open_secrets(vault, endpoint).await.map(Arc::new) })
            .await?;
        Ok(opened.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboxkit_core::endpoint::{EndpointUrl, SealedSecret};
    use outboxkit_core::ids::{MessageId, Topic, TopicFilter};
    use outboxkit_core::signing::{verify, DEFAULT_TOLERANCE};

    fn t() -> Timestamp {
        Timestamp::from_unix_millis(1_700_000_000_000).unwrap()
    }

    fn fixture(format: BodyFormat) -> (Endpoint, Message) {
        let id = EndpointId::parse("01900000-0000-7000-8000-0000000000aa").unwrap();
        let e = Endpoint {
            id,
            tenant: TenantId::default(),
            url: EndpointUrl::parse("https://hooks.example/x").unwrap(),
            description: String::new(),
            filter: TopicFilter::all(),
            status: EndpointStatus::Active,
            secret: SealedSecret(vec![]),
            previous_secret: None,
            body_format: format,
            rate_limit: None,
            last_delivery: None,
            created_at: t(),
            updated_at: t(),
        };
        let m = Message {
            id: MessageId::parse("01900000-0000-7000-8000-0000000000bb").unwrap(),
            topic: Topic::new("order.created").unwrap(),
            payload: br#"{"id":7}"#.to_vec(),
            tenant: TenantId::default(),
            ordering_key: None,
            idempotency_key: None,
            available_at: t(),
            headers: Default::default(),
            cause: None,
            created_at: t(),
        };
        (e, m)
    }

    #[test]
    fn signed_requests_verify_with_either_secret() {
        let (e, m) = fixture(BodyFormat::Envelope);
        let (cur, prev) = (
            WebhookSecret::from_bytes(vec![1; 32]).unwrap(),
            WebhookSecret::from_bytes(vec![2; 32]).unwrap(),
        );
        let d = DeliveryId::parse("01900000-0000-7000-8000-0000000000cc").unwrap();
        let names = HeaderNames::default();
        let r = signed_request(
            &e,
            &[cur.clone(), prev.clone()],
            &m,
            d,
            t(),
            &names,
            Duration::from_secs(10),
        );
        assert_eq!(r.header("webhook-id"), Some(d.to_string().as_str()));
        assert_eq!(r.header("webhook-timestamp"), Some("1700000000"));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["type"], "order.created");
        for s in [&cur, &prev] {
            assert_eq!(
                verify(
                    &[s],
                    &names,
                    |n| r.header(n),
                    &r.body,
                    t(),
                    DEFAULT_TOLERANCE
                ),
                Ok(())
            );
        }
        let raw = signed_request(
            &fixture(BodyFormat::Raw).0,
            &[cur],
            &m,
            d,
            t(),
            &names,
            Duration::from_secs(10),
        );
        assert_eq!(raw.body, m.payload);
    }

    #[test]
    fn gates() {
        let (mut e, _) = fixture(BodyFormat::Envelope);
        assert_eq!(endpoint_gate(None), Some(Outcome::EndpointMissing));
        assert_eq!(endpoint_gate(Some(&e)), None);
        e.status = EndpointStatus::Paused;
        assert_eq!(endpoint_gate(Some(&e)), Some(Outcome::EndpointPaused));
        e.status = EndpointStatus::Disabled(outboxkit_core::endpoint::DisabledReason::Gone);
        assert_eq!(endpoint_gate(Some(&e)), Some(Outcome::EndpointDisabled));
    }
}
