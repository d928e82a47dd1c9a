//! The request of one webhook attempt, built from the endpoint, its opened secrets and the
//! message: the body ([`webhook_body`]), the Standard Webhooks headers and signatures
//! ([`signed_request`]), the secrets opened through the vault ([`open_secrets`]), and the
//! endpoint's custom headers ([`open_headers`], [`with_custom_headers`]).
//!
//! Pure but for the vault call: the dispatcher sends these requests, and the admin API's
//! "send a test event" builds them the same way. `outboxkit_dispatch` re-exports all three.

use std::time::Duration;

use crate::endpoint::{BodyFormat, Endpoint, HeaderValue};
use crate::error::{Error, Result};
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

/// An endpoint's custom headers as sent: `(name, value)` in order, secret values opened
/// through the vault. An error names the header, never its value.
pub async fn open_headers(
    vault: &DynSecretVault,
    endpoint: &Endpoint,
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::with_capacity(endpoint.headers.len());
    for h in &endpoint.headers {
        let value = match &h.value {
            HeaderValue::Plain(v) => v.clone(),
            HeaderValue::Secret(sealed) => {
                let ctx = SecretContext::endpoint_header(&endpoint.tenant, endpoint.id, &h.name);
                let plain = vault.open(sealed, &ctx).await.map_err(|_| {
                    Error::invalid_input(
                        "headers",
                        format!("the secret value of header `{}` cannot be opened", h.name),
                    )
                })?;
                let text = String::from_utf8(plain).map_err(|_| {
                    Error::invalid_input(
                        "headers",
                        format!("the secret value of header `{}` is not text", h.name),
                    )
                })?;
                // Checked like a plain value (it was before it was sealed by the admin).
                crate::endpoint_headers::check_header_value(&h.name, &text)?;
                text
            }
        };
        out.push((h.name.clone(), value));
    }
    Ok(out)
}

/// Add an endpoint's opened custom headers ([`open_headers`]) to `request`, after the
/// headers outbox sets. They are not signed (a receiver checks them itself). A name the
/// request already carries (a signature header under a prefix the endpoint's admin did
/// not know of) is left out: outbox's own headers always win.
pub fn with_custom_headers(
    mut request: SignedRequest,
    headers: &[(String, String)],
) -> SignedRequest {
    for (name, value) in headers {
        if request.header(name).is_none() {
            request.headers.push((name.clone(), value.clone()));
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
            headers: vec![],
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

    #[tokio::test]
    async fn custom_headers_open_under_their_own_context_and_never_replace_ours() {
        use crate::endpoint::CustomHeader;
        use crate::vault::{PlaintextVault, SecretVault};
        let (mut e, m) = fixture(BodyFormat::Envelope);
        let vault = PlaintextVault;
        let ctx = SecretContext::endpoint_header(&e.tenant, e.id, "x-api-key");
        e.headers = vec![
            CustomHeader {
                name: "x-route".into(),
                value: HeaderValue::Plain("eu".into()),
            },
            CustomHeader {
                name: "x-api-key".into(),
                value: HeaderValue::Secret(vault.seal(b"k-1", &ctx).await.unwrap()),
            },
        ];
        let opened = open_headers(&vault, &e).await.unwrap();
        assert_eq!(
            opened,
            [
                ("x-route".to_owned(), "eu".to_owned()),
                ("x-api-key".to_owned(), "k-1".to_owned())
            ]
        );
        let secret = WebhookSecret::from_bytes(vec![1; 32]).unwrap();
        let d = DeliveryId::parse("01900000-0000-7000-8000-0000000000cc").unwrap();
        let names = HeaderNames::default();
        let r = signed_request(&e, &[secret], &m, d, t(), &names, Duration::from_secs(1));
        let mut clash = opened.clone();
        clash.push(("webhook-id".to_owned(), "forged".to_owned()));
        let r = with_custom_headers(r, &clash);
        assert_eq!(r.header("x-api-key"), Some("k-1"));
        assert_eq!(r.header("x-route"), Some("eu"));
        assert_eq!(r.header("webhook-id"), Some(d.to_string().as_str()));
        // A sealed value moved to another header does not open, and the error names the
        // header, not the value.
        e.headers[1].name = "x-other".into();
        let err = open_headers(&vault, &e).await.unwrap_err();
        assert!(err.to_string().contains("x-other"), "{err}");
        assert!(!err.to_string().contains("k-1"), "{err}");
    }
}
