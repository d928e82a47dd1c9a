//! [`HttpTransport`]: the webhook transport on reqwest with rustls.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{ErrorClass, SignedRequest, WebhookResponse, WebhookTransport};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, HOST};

use crate::config::HttpTransportConfig;
use crate::egress::{EgressPolicy, PolicyResolver};
use crate::error::{webhook_failure, HttpError};

/// How much of the body is kept for the excerpt (the ledger keeps 300 bytes of it).
const EXCERPT_BYTES: usize = 1024;

/// Sends signed webhooks over HTTP(S).
///
/// - POSTs the body with the request's headers (the dispatcher adds the Standard Webhooks
///   ones), `content-type: application/json` unless given, `user-agent: outbox/<version>`
///   and an explicit `content-length`.
/// - One deadline (`SignedRequest::timeout`) over connect, headers and body.
/// - Reads at most 64 KiB of the answer, keeps an excerpt of at most 300 bytes, drops the
///   rest unread.
/// - Never follows redirects: a 3xx is returned as an answer.
/// - Applies the [`EgressPolicy`] before connecting, through its own DNS resolver; no
///   proxy from the environment is used (it would bypass the policy).
/// - Reuses connections (a pool per host).
///
/// ```no_run
/// use outboxkit_http::{EgressPolicy, HttpTransport};
///
/// let transport = HttpTransport::new(EgressPolicy::default())?;
/// # Ok::<(), outboxkit_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct HttpTransport {
    client: reqwest::Client,
    policy: Arc<EgressPolicy>,
    config: HttpTransportConfig,
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
        let policy = Arc::new(policy);
        let client = crate::tls::client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(PolicyResolver::new(policy.clone())))
            .https_only(!policy.allows_http())
            .user_agent(config.user_agent.clone())
            .tcp_nodelay(true)
            .build()
            .map_err(HttpError::Client)?;
        Ok(HttpTransport {
            client,
            policy,
            config,
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

    /// The reqwest request of `request`, taking its parts: the body and the URL move into
    /// it, each header value's text becomes the header value without a copy.
    fn build(&self, request: SignedRequest, deadline: Duration) -> Option<reqwest::Request> {
        let SignedRequest {
            url, headers, body, ..
        } = request;
        // Room for the client's own (`user-agent`, `accept`) too: no growth on the way.
        let mut map = HeaderMap::with_capacity(headers.len() + 4);
        for (name, value) in headers {
            let name = header_name(&name)?;
            if name == HOST || name == CONTENT_LENGTH {
                continue; // set by the client from the URL and the body
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
        // Built in place: what `client.post(url).headers(map).body(body).timeout(deadline)`
        // builds, without the builder merging the map into an empty one.
        let mut http = reqwest::Request::new(reqwest::Method::POST, url.into_url());
        *http.headers_mut() = map;
        *http.body_mut() = Some(body.into());
        *http.timeout_mut() = Some(deadline);
        Some(http)
    }

    async fn exchange(&self, request: reqwest::Request) -> WebhookResponse {
        let mut response = match self.client.execute(request).await {
            Ok(r) => r,
            Err(e) => return failed_with(&e),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut kept = Vec::new();
        let mut read = 0usize;
        while read < self.config.max_body {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    read += chunk.len();
                    let room = EXCERPT_BYTES.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) => break,
                // The answer's status arrived; a body cut short does not change it, except
                // that a deadline passing mid-body is a timeout.
                Err(e) if e.is_timeout() => return failed_with(&e),
                Err(_) => break,
            }
        }
        // Dropping the response here closes a connection whose body was not read to its end.
        drop(response);
        WebhookResponse::answered(status, retry_after, &String::from_utf8_lossy(&kept))
    }
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

fn failed_with(e: &reqwest::Error) -> WebhookResponse {
    let (class, detail) = webhook_failure(e);
    failed(class, detail)
}

fn failed(class: ErrorClass, detail: String) -> WebhookResponse {
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
        let deadline = if request.timeout.is_zero() {
            self.config.timeout
        } else {
            request.timeout
        };
        let Some(http) = self.build(request, deadline) else {
            return failed(
                ErrorClass::Network,
                "a request header is not valid http".into(),
            );
        };
        // One deadline: reqwest's request timeout runs from connect to the end of the body
        // (a body read past it fails with a timeout, which `exchange` reports as one).
        self.exchange(http).await
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
