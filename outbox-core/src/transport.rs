//! The webhook channel's port: [`WebhookTransport`] sends one signed request.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::endpoint::EndpointUrl;
use crate::model::{excerpt, AttemptDetail, ErrorClass};
use crate::verdict::Outcome;

/// One signed webhook request, ready to send.
#[derive(Clone, PartialEq, Eq)]
pub struct SignedRequest {
    /// Where to.
    pub url: EndpointUrl,
    /// Every header to send (`webhook-id`, `webhook-timestamp`, `webhook-signature`,
    /// `content-type`).
    pub headers: Vec<(String, String)>,
    /// The exact body that was signed.
    pub body: Vec<u8>,
    /// The deadline over connect, headers and body.
    pub timeout: Duration,
}

impl SignedRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for SignedRequest {
    // No URL path, no body, no signature in debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignedRequest")
            .field("url", &self.url)
            .field("body_len", &self.body.len())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookResponse {
    /// An HTTP answer.
    Answered {
        /// The status.
        status: u16,
        /// The `Retry-After` header, verbatim.
        retry_after: Option<String>,
        /// At most 300 bytes of the body, for the ledger.
        excerpt: String,
    },
    /// No answer.
    Failed {
        /// `timeout`, `network`, `dns` or `egress-refused`.
        class: ErrorClass,
        /// A short description (no address, no secret).
        detail: String,
    },
}

impl WebhookResponse {
    /// An answer with its body excerpt cut to the ledger limit.
    pub fn answered(status: u16, retry_after: Option<String>, body: &str) -> Self {
        WebhookResponse::Answered {
            status,
            retry_after,
            excerpt: excerpt(body),
        }
    }

    /// The classification input.
    pub fn outcome(&self) -> Outcome {
        match self {
            WebhookResponse::Answered {
                status,
                retry_after,
                ..
            } => Outcome::Http {
                status: *status,
                retry_after: retry_after.clone(),
            },
            WebhookResponse::Failed { class, .. } => Outcome::Transport(*class),
        }
    }

    /// The excerpt or detail kept in the ledger.
    pub fn excerpt(&self) -> &str {
        match self {
            WebhookResponse::Answered { excerpt, .. } => excerpt,
            WebhookResponse::Failed { detail, .. } => detail,
        }
    }
}

/// One request's answer and, when the transport keeps it, the attempt in full.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// What came back.
    pub response: WebhookResponse,
    /// The request headers as sent, the response's headers and body (within the cap), the
    /// timings and the address (DESIGN §18); `None` from a transport that keeps none.
    pub detail: Option<Box<AttemptDetail>>,
}

/// Sends signed webhook requests.
///
/// # Contract
/// - `send` MUST NOT follow redirects (a 3xx is returned as an answer).
/// - `send` MUST return within `request.timeout` (plus scheduling slack), reporting a stall
///   as [`ErrorClass::Timeout`].
/// - `send` MUST report a refused address or scheme as [`ErrorClass::EgressRefused`] without
///   connecting.
#[async_trait]
pub trait WebhookTransport: Send + Sync + fmt::Debug + 'static {
    /// Send one request.
    async fn send(&self, request: SignedRequest) -> WebhookResponse;

    /// Send one request and keep the attempt in full. The default keeps nothing beyond
    /// [`WebhookTransport::send`]'s answer.
    async fn send_detailed(&self, request: SignedRequest) -> Sent {
        Sent {
            response: self.send(request).await,
            detail: None,
        }
    }
}

/// A shared [`WebhookTransport`].
pub type DynWebhookTransport = dyn WebhookTransport;

#[async_trait]
impl<T: WebhookTransport + ?Sized> WebhookTransport for std::sync::Arc<T> {
    async fn send(&self, request: SignedRequest) -> WebhookResponse {
        (**self).send(request).await
    }
    async fn send_detailed(&self, request: SignedRequest) -> Sent {
        (**self).send_detailed(request).await
    }
}

#[async_trait]
impl<T: WebhookTransport + ?Sized> WebhookTransport for Box<T> {
    async fn send(&self, request: SignedRequest) -> WebhookResponse {
        (**self).send(request).await
    }
    async fn send_detailed(&self, request: SignedRequest) -> Sent {
        (**self).send_detailed(request).await
    }
}
