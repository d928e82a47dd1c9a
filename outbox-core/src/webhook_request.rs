//! The request of one webhook attempt, built from the endpoint, its opened secrets and the
//! message: the body ([`webhook_body`]), the Standard Webhooks headers and signatures
//! ([`signed_request`]), and the secrets opened through the vault ([`open_secrets`]).
//!
//! Pure but for the vault call: the dispatcher sends these requests, and the admin API's
//! "send a test event" builds them the same way. `outboxkit_dispatch` re-exports all three.

use std::time::Duration;

use crate::endpoint::{BodyFormat, Endpoint};
use crate::error::Result;
use crate::ids::DeliveryId;
use crate::model::{Envelope, Message};
use crate::signing::{sign_keyed, HeaderNames, SigningKey, WebhookSecret};
use crate::time::Timestamp;
use crate::transport::SignedRequest;
use crate::vault::{DynSecretVault, SecretContext};

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
    let keys: Vec<SigningKey> = secrets.iter().map(SigningKey::new).collect();
    signed_request_keyed(endpoint, &keys, message, delivery, now, names, timeout)
}

/// [`signed_request`] with the secrets keyed beforehand (current first): the dispatcher
/// keys an endpoint's secrets once per sealed secret (kept until a rotation), not once per
/// request.
pub fn signed_request_keyed(
    endpoint: &Endpoint,
    keys: &[SigningKey],
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
    let signature = sign_keyed(keys, &id, &ts, &body);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{EndpointStatus, EndpointUrl, SealedSecret};
    use crate::ids::{EndpointId, MessageId, TenantId, Topic, TopicFilter};
    use crate::signing::{verify, DEFAULT_TOLERANCE};

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
            fifo: false,
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
            std::slice::from_ref(&cur),
            &m,
            d,
            t(),
            &names,
            Duration::from_secs(10),
        );
        assert_eq!(raw.body, m.payload);
        let keyed = signed_request_keyed(
            &e,
            &[SigningKey::new(&cur), SigningKey::new(&prev)],
            &m,
            d,
            t(),
            &names,
            Duration::from_secs(10),
        );
        assert_eq!(keyed, r, "keyed beforehand: the same request");
    }
}
