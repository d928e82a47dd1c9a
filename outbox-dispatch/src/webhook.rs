//! The webhook channel: gate a delivery on its endpoint's status, read endpoints once per
//! batch, open and key their secrets once per sealed secret, forward the trace context. The signed request itself is
//! built by `outboxkit_core::webhook_request` (re-exported here).

use foldhash::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

use outboxkit_core::endpoint::{CustomHeader, Endpoint, EndpointStatus, SealedSecret};
use outboxkit_core::error::Result;
use outboxkit_core::ids::{EndpointId, TenantId};
use outboxkit_core::model::Message;
use outboxkit_core::signing::SigningKey;
use outboxkit_core::store::DynStore;
use outboxkit_core::transport::SignedRequest;
use outboxkit_core::vault::DynSecretVault;
use outboxkit_core::verdict::Outcome;
pub use outboxkit_core::webhook_request::{
    open_headers, open_secrets, signed_request, signed_request_keyed, webhook_body,
    with_custom_headers,
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

/// Write the values of `endpoint`'s secret custom headers as
/// [`REDACTED`](outboxkit_core::model::REDACTED) in an attempt's recorded request headers:
/// the transport records what it sent, and only the endpoint knows which values were
/// sealed (an `authorization` value the transport redacts itself).
pub(crate) fn redact_secret_headers(
    detail: &mut outboxkit_core::model::AttemptDetail,
    endpoint: &Endpoint,
) {
    for h in endpoint.headers.iter().filter(|h| h.value.is_secret()) {
        for (name, value) in &mut detail.request_headers {
            if name.eq_ignore_ascii_case(&h.name) {
                outboxkit_core::model::REDACTED.clone_into(value);
            }
        }
    }
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
/// (a failed read is not kept: the next delivery tries again).
#[derive(Debug, Default)]
pub(crate) struct EndpointCache {
    entries: Mutex<HashMap<(TenantId, EndpointId), Arc<EndpointRead>>>,
}

/// One endpoint read of a batch (`None`: the endpoint does not exist), shared by its
/// deliveries without a copy.
type EndpointRead = OnceCell<Option<Arc<Endpoint>>>;

impl EndpointCache {
    pub(crate) async fn get(
        &self,
        store: &DynStore,
        tenant: &TenantId,
        id: EndpointId,
    ) -> Result<Option<Arc<Endpoint>>> {
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
                    Ok(e) => Ok(Some(Arc::new(e))),
                    Err(e) if e.is_not_found() => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(read.clone())
    }
}

/// The endpoints' secrets, opened through the vault and keyed for HMAC once for as long
/// as the dispatcher lives, each entry bound to the sealed bytes it was opened from (the
/// current secret and the previous one): a rotation stores new sealed bytes (a vault seals
/// with a fresh nonce), so the next delivery, reading the endpoint afresh with its batch,
/// finds its entry stale and opens the new ones; anything else reuses the keys. Single-
/// flight per endpoint (the deliveries that find no keys wait for one opening); a failed
/// opening is not kept (the next delivery asks the vault again and, if it fails again,
/// is parked as before).
#[derive(Debug, Default)]
pub(crate) struct SigningKeys {
    entries: Mutex<HashMap<EndpointId, Arc<KeyEntry>>>,
}

/// The keys of one endpoint of `tenant`, opened from `sealed` (current, then previous),
/// and its custom headers, opened from `headers` (as stored: a changed plain value or a
/// newly sealed secret value makes the entry stale like a rotation).
#[derive(Debug)]
struct KeyEntry {
    tenant: TenantId,
    sealed: (SealedSecret, Option<SealedSecret>),
    headers: Vec<CustomHeader>,
    keys: OnceCell<Arc<OpenedEndpoint>>,
}

impl KeyEntry {
    fn opens(&self, endpoint: &Endpoint) -> bool {
        self.tenant == endpoint.tenant
            && self.sealed.0 == endpoint.secret
            && self.sealed.1 == endpoint.previous_secret
            && self.headers == endpoint.headers
    }
}

/// What a request to an endpoint needs opened: its signing keys (current first) and its
/// custom headers with their secret values in clear (never logged).
pub(crate) struct OpenedEndpoint {
    pub(crate) keys: Vec<SigningKey>,
    pub(crate) headers: Vec<(String, String)>,
}

impl std::fmt::Debug for OpenedEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OpenedEndpoint({} keys, {} headers)",
            self.keys.len(),
            self.headers.len()
        )
    }
}

/// The most endpoints whose keys are kept: past it, the cache starts afresh (endpoints
/// deleted long ago do not pile up; the ones in use are opened again once).
const KEPT_ENDPOINTS: usize = 10_000;

impl SigningKeys {
    /// `endpoint`'s secrets (current, then previous), keyed, and its custom headers: from
    /// the cache when they were opened from the same sealed bytes and headers, else opened
    /// through `vault`. A secret header value that does not open fails like a secret.
    pub(crate) async fn get(
        &self,
        vault: &DynSecretVault,
        endpoint: &Endpoint,
    ) -> Result<Arc<OpenedEndpoint>> {
        let entry = {
            let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(&endpoint.id) {
                Some(e) if e.opens(endpoint) => e.clone(),
                _ => {
                    if map.len() >= KEPT_ENDPOINTS {
                        map.clear();
                    }
                    let e = Arc::new(KeyEntry {
                        tenant: endpoint.tenant.clone(),
                        sealed: (endpoint.secret.clone(), endpoint.previous_secret.clone()),
                        headers: endpoint.headers.clone(),
                        keys: OnceCell::new(),
                    });
                    map.insert(endpoint.id, e.clone());
                    e
                }
            }
        };
        let keys = entry
            .keys
            .get_or_try_init(|| async {
                let secrets = open_secrets(vault, endpoint).await?;
                let headers = open_headers(vault, endpoint).await?;
                Ok::<_, outboxkit_core::Error>(Arc::new(OpenedEndpoint {
                    keys: secrets.iter().map(SigningKey::new).collect(),
                    headers,
                }))
            })
            .await?;
        Ok(keys.clone())
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
            headers: vec![],
            body_format: BodyFormat::Envelope,
            rate_limit: None,
            fifo: false,
            last_delivery: None,
            created_at: t,
            updated_at: t,
        }
    }

    /// A plaintext vault that counts its openings and fails while `failing` is set.
    #[derive(Debug, Default)]
    struct Counting {
        opened: std::sync::atomic::AtomicUsize,
        failing: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl outboxkit_core::vault::SecretVault for Counting {
        async fn seal(
            &self,
            plain: &[u8],
            context: &outboxkit_core::vault::SecretContext,
        ) -> Result<SealedSecret> {
            outboxkit_core::PlaintextVault.seal(plain, context).await
        }
        async fn open(
            &self,
            sealed: &SealedSecret,
            context: &outboxkit_core::vault::SecretContext,
        ) -> Result<Vec<u8>> {
            use std::sync::atomic::Ordering::SeqCst;
            if self.failing.load(SeqCst) {
                return Err(outboxkit_core::Error::invalid_input("secret", "no key"));
            }
            self.opened.fetch_add(1, SeqCst);
            outboxkit_core::PlaintextVault.open(sealed, context).await
        }
    }

    async fn sealed(vault: &Counting, e: &Endpoint, byte: u8) -> SealedSecret {
        use outboxkit_core::vault::{SecretContext, SecretVault};
        vault
            .seal(&[byte; 32], &SecretContext::endpoint(&e.tenant, e.id))
            .await
            .unwrap()
    }

    fn signature(opened: &OpenedEndpoint) -> String {
        outboxkit_core::signing::sign_keyed(&opened.keys, "msg_1", "1700000000", b"{}")
    }

    #[tokio::test]
    async fn keys_are_opened_once_per_sealed_secret_and_a_failure_is_not_kept() {
        use outboxkit_core::signing::{sign, WebhookSecret};
        use std::sync::atomic::Ordering::SeqCst;
        let vault = Counting::default();
        let keys = SigningKeys::default();
        let mut e = endpoint();
        e.secret = sealed(&vault, &e, 1).await;
        let one = WebhookSecret::from_bytes(vec![1; 32]).unwrap();
        let two = WebhookSecret::from_bytes(vec![2; 32]).unwrap();
        for _ in 0..3 {
            let k = keys.get(&vault, &e).await.unwrap();
            assert_eq!(signature(&k), sign(&[&one], "msg_1", 1_700_000_000, b"{}"));
        }
        assert_eq!(vault.opened.load(SeqCst), 1, "opened once, then reused");

        // A rotation: new sealed bytes, the old ones as the previous secret.
        e.previous_secret = Some(e.secret.clone());
        e.secret = sealed(&vault, &e, 2).await;
        let k = keys.get(&vault, &e).await.unwrap();
        assert_eq!(
            signature(&k),
            sign(&[&two, &one], "msg_1", 1_700_000_000, b"{}"),
            "both secrets sign, the new one first"
        );
        assert_eq!(vault.opened.load(SeqCst), 3);

        // The previous secret dropped: stale again, opened again.
        e.previous_secret = None;
        assert_eq!(
            signature(&keys.get(&vault, &e).await.unwrap()),
            sign(&[&two], "msg_1", 1_700_000_000, b"{}")
        );
        assert_eq!(vault.opened.load(SeqCst), 4);

        // A secret that does not open fails every time it is asked for; once it opens,
        // it is kept.
        e.secret = sealed(&vault, &e, 3).await;
        vault.failing.store(true, SeqCst);
        for _ in 0..2 {
            assert!(keys.get(&vault, &e).await.is_err());
        }
        vault.failing.store(false, SeqCst);
        keys.get(&vault, &e).await.unwrap();
        keys.get(&vault, &e).await.unwrap();
        assert_eq!(vault.opened.load(SeqCst), 5);

        // Another tenant's endpoint under the same id never gets these keys.
        let mut other = e.clone();
        other.tenant = TenantId::new("other").unwrap();
        other.secret = sealed(&vault, &other, 3).await;
        keys.get(&vault, &other).await.unwrap();
        assert_eq!(vault.opened.load(SeqCst), 6);
    }

    #[tokio::test]
    async fn secret_header_values_are_opened_once_and_again_when_changed() {
        use outboxkit_core::endpoint::{CustomHeader, HeaderValue};
        use outboxkit_core::vault::{SecretContext, SecretVault};
        use std::sync::atomic::Ordering::SeqCst;
        let vault = Counting::default();
        let keys = SigningKeys::default();
        let mut e = endpoint();
        e.secret = sealed(&vault, &e, 1).await;
        let ctx = SecretContext::endpoint_header(&e.tenant, e.id, "x-api-key");
        let header = |sealed| CustomHeader {
            name: "x-api-key".into(),
            value: HeaderValue::Secret(sealed),
        };
        e.headers = vec![header(vault.seal(b"key-1", &ctx).await.unwrap())];
        for _ in 0..3 {
            let o = keys.get(&vault, &e).await.unwrap();
            assert_eq!(o.headers, [("x-api-key".to_owned(), "key-1".to_owned())]);
        }
        assert_eq!(
            vault.opened.load(SeqCst),
            2,
            "the secret and the header, once"
        );
        // A new sealed value (a rotation of the header's value): opened afresh.
        e.headers = vec![header(vault.seal(b"key-2", &ctx).await.unwrap())];
        let o = keys.get(&vault, &e).await.unwrap();
        assert_eq!(o.headers, [("x-api-key".to_owned(), "key-2".to_owned())]);
        assert_eq!(vault.opened.load(SeqCst), 4);
        // A value that does not open fails, and is not kept.
        vault.failing.store(true, SeqCst);
        e.headers.push(CustomHeader {
            name: "x-plain".into(),
            value: HeaderValue::Plain("p".into()),
        });
        assert!(keys.get(&vault, &e).await.is_err());
        vault.failing.store(false, SeqCst);
        let o = keys.get(&vault, &e).await.unwrap();
        assert_eq!(o.headers.len(), 2);
        assert!(!format!("{o:?}").contains("key-2"));
    }

    #[test]
    fn secret_header_values_are_redacted_in_the_record_and_plain_ones_kept() {
        use outboxkit_core::endpoint::HeaderValue;
        use outboxkit_core::model::{AttemptDetail, REDACTED};
        let mut e = endpoint();
        e.headers = vec![
            CustomHeader {
                name: "x-api-key".into(),
                value: HeaderValue::Secret(SealedSecret(vec![1, 2, 3])),
            },
            CustomHeader {
                name: "x-route".into(),
                value: HeaderValue::Plain("eu".into()),
            },
        ];
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let mut d = AttemptDetail {
            request_headers: vec![
                pair("webhook-signature", "v1,abc="),
                pair("X-Api-Key", "hunter2"),
                pair("x-route", "eu"),
            ],
            ..AttemptDetail::default()
        };
        redact_secret_headers(&mut d, &e);
        assert_eq!(
            d.request_headers,
            vec![
                pair("webhook-signature", "v1,abc="),
                pair("X-Api-Key", REDACTED),
                pair("x-route", "eu"),
            ]
        );
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
