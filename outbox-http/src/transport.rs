//! [`HttpTransport`]: the webhook transport on hyper-util's pooled client with rustls.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use outboxkit_core::{ErrorClass, SignedRequest, WebhookResponse, WebhookTransport};

use crate::config::HttpTransportConfig;
use crate::egress::{EgressPolicy, PolicyResolver};
use crate::error::{webhook_failure, HttpError};
use crate::timing::Timed;

/// How much of the body is kept for the excerpt (the ledger keeps 300 bytes of it).
pub(crate) const EXCERPT_BYTES: usize = 1024;

/// The connector: TCP through the policy's resolver, then rustls for `https`, each new
/// connection timed (`timing.rs`).
type Connector = Timed<hyper_rustls::HttpsConnector<HttpConnector<PolicyResolver>>>;

/// Sends signed webhooks over HTTP(S).
///
/// - POSTs the body with the request's headers (the dispatcher adds the Standard Webhooks
///   ones), `content-type: application/json` unless given, `user-agent: outbox/<version>`
///   and an explicit `content-length`.
/// - One deadline (`SignedRequest::timeout`) over connect, headers and body.
/// - Reads at most 64 KiB of the answer, keeps an excerpt of at most 300 bytes, drops the
///   rest unread. [`WebhookTransport::send_detailed`] keeps the attempt in full besides:
///   the request headers as sent (`authorization` values as
///   [`REDACTED`](outboxkit_core::model::REDACTED)), the response headers, the body up to
///   [`HttpTransportConfig::response_body_cap`], the timings and the remote address.
/// - Never follows redirects: a 3xx is returned as an answer.
/// - Applies the [`EgressPolicy`] before connecting, through its own DNS resolver; no
///   proxy from the environment is used (it would bypass the policy).
/// - Reuses connections (a pool per host; HTTP/2 when the server offers it over TLS).
///
/// Built on hyper-util's pooled client directly (not reqwest, which the mailer uses): a
/// webhook needs none of reqwest's layers (redirects, retries, cookies, proxies), and
/// going without them halves what the client costs a request beyond hyper's own work.
///
/// ```no_run
/// use outboxkit_http::{EgressPolicy, HttpTransport};
///
/// let transport = HttpTransport::new(EgressPolicy::default())?;
/// # Ok::<(), outboxkit_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct HttpTransport {
    client: Client<Connector, Full<Bytes>>,
    policy: Arc<EgressPolicy>,
    config: HttpTransportConfig,
    user_agent: HeaderValue,
}

impl HttpTransport {
    /// A transport with the default settings.
    pub fn new(policy: EgressPolicy) -> outboxkit_core::Result<Self> {
        Self::with_config(policy, HttpTransportConfig::default())
    }

    /// A transport with these settings (validated here: a bad one is `Misconfigured`).
    pub fn with_config(
        policy: EgressPolicy,
        config: HttpTransportConfig,
    ) -> outboxkit_core::Result<Self> {
        config.validate()?;
        let user_agent =
            HeaderValue::from_str(&config.user_agent).map_err(|_| HttpError::Setting {
                field: "user_agent",
                message: "must be visible ascii without control characters",
            })?;
        let policy = Arc::new(policy);
        // Which schemes are allowed is the policy's check, made before anything connects.
        let http = HttpConnector::new_with_resolver(PolicyResolver::new(policy.clone()));
        let client = crate::tls::pooled(crate::tls::connector(http));
        Ok(HttpTransport {
            client,
            policy,
            config,
            user_agent,
        })
    }

    /// The egress policy in force.
    pub fn policy(&self) -> &EgressPolicy {
        &self.policy
    }

    /// The settings in force.
    pub fn config(&self) -> &HttpTransportConfig {
        &self.config
    }

    /// The HTTP request of `request`, taking its parts: the body moves into it, each header
    /// value's text becomes the header value without a copy.
    pub(crate) fn build(&self, request: SignedRequest) -> Option<http::Request<Full<Bytes>>> {
        let SignedRequest {
            url, headers, body, ..
        } = request;
        // Room for `user-agent` too: no growth on the way.
        let mut map = HeaderMap::with_capacity(headers.len() + 3);
        for (name, value) in headers {
            let name = header_name(&name)?;
            if name == HOST || name == CONTENT_LENGTH {
                continue; // set from the URL and the body
            }
            // Visible ASCII only, as `HeaderValue::from_str` requires.
            if !value.bytes().all(|b| (32..127).contains(&b) || b == b'\t') {
                return None;
            }
            map.append(name, HeaderValue::try_from(value).ok()?);
        }
        if !map.contains_key(CONTENT_TYPE) {
            map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        map.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        if !map.contains_key(http::header::USER_AGENT) {
            map.insert(http::header::USER_AGENT, self.user_agent.clone());
        }
        let uri = http::Uri::try_from(String::from(url.into_url())).ok()?;
        let mut http = http::Request::new(Full::new(Bytes::from(body)));
        *http.method_mut() = http::Method::POST;
        *http.uri_mut() = uri;
        *http.headers_mut() = map;
        Some(http)
    }

    async fn exchange(&self, request: http::Request<Full<Bytes>>) -> WebhookResponse {
        let response = match self.client.request(request).await {
            Ok(r) => r,
            Err(e) => {
                let (class, detail) = webhook_failure(&e);
                return failed(class, detail);
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let read = self.read_body(response.into_body(), EXCERPT_BYTES).await;
        WebhookResponse::answered(status, retry_after, &String::from_utf8_lossy(&read.kept))
    }

    /// Read at most `max_body` bytes of `body`, keeping the first `keep` of them.
    pub(crate) async fn read_body(&self, mut body: hyper::body::Incoming, keep: usize) -> Body {
        // Sized once from the announced length, so the kept bytes are copied once.
        let hint = hyper::body::Body::size_hint(&body).lower();
        let mut kept = Vec::with_capacity(keep.min(usize::try_from(hint).unwrap_or(keep)));
        let mut read = 0usize;
        while read < self.config.max_body {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(chunk) = frame.data_ref() {
                        read += chunk.len();
                        let room = keep.saturating_sub(kept.len());
                        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    }
                }
                // The answer's status arrived; a body cut short does not change it (a
                // deadline passing mid-body ends the whole exchange as a timeout).
                Some(Err(_)) | None => break,
            }
        }
        let unread = read >= self.config.max_body && !hyper::body::Body::is_end_stream(&body);
        // Dropping the body here closes a connection whose body was not read to its end.
        drop(body);
        Body { kept, read, unread }
    }

    /// The deadline of `request`: its own, else the configured one.
    pub(crate) fn deadline(&self, request: &SignedRequest) -> std::time::Duration {
        if request.timeout.is_zero() {
            self.config.timeout
        } else {
            request.timeout
        }
    }

    pub(crate) fn client(&self) -> &Client<Connector, Full<Bytes>> {
        &self.client
    }
}

/// What [`HttpTransport::read_body`] read.
pub(crate) struct Body {
    /// The first bytes kept.
    pub(crate) kept: Vec<u8>,
    /// How many bytes were read.
    pub(crate) read: usize,
    /// The read stopped at the read cap with more to come.
    pub(crate) unread: bool,
}

/// The header names every signed request carries, as constants: a name among them costs
/// no parse and no allocation.
const KNOWN: [&str; 4] = [
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "traceparent",
];

/// `name` as a header name: a constant for the names every request carries, else parsed.
fn header_name(name: &str) -> Option<HeaderName> {
    if name == "content-type" {
        return Some(CONTENT_TYPE);
    }
    match KNOWN.iter().find(|k| **k == name) {
        Some(k) => Some(HeaderName::from_static(k)),
        None => HeaderName::from_bytes(name.as_bytes()).ok(),
    }
}

pub(crate) fn failed(class: ErrorClass, detail: String) -> WebhookResponse {
    // No URL, no address, no payload in the event: the class and the short detail only.
    tracing::debug!(class = class.as_str(), detail = %detail, "webhook send failed");
    WebhookResponse::Failed { class, detail }
}

#[async_trait]
impl WebhookTransport for HttpTransport {
    async fn send(&self, request: SignedRequest) -> WebhookResponse {
        if let Err(refusal) = self.policy.check_url(&request.url) {
            return failed(ErrorClass::EgressRefused, refusal.to_string());
        }
        let deadline = self.deadline(&request);
        let Some(http) = self.build(request) else {
            return failed(
                ErrorClass::Network,
                "a request header is not valid http".into(),
            );
        };
        // One deadline from connect to the end of the body read.
        match tokio::time::timeout(deadline, self.exchange(http)).await {
            Ok(response) => response,
            Err(_) => failed(ErrorClass::Timeout, "the deadline passed".into()),
        }
    }

    async fn send_detailed(&self, request: SignedRequest) -> outboxkit_core::Sent {
        self.send_keeping_detail(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_constants_when_known_and_parsed_otherwise() {
        for n in KNOWN.iter().chain(&["content-type", "x-custom", "svix-id"]) {
            assert_eq!(
                header_name(n),
                Some(HeaderName::from_bytes(n.as_bytes()).unwrap()),
                "{n}"
            );
        }
        assert_eq!(header_name("bad name"), None);
        assert_eq!(header_name(""), None);
    }
}
