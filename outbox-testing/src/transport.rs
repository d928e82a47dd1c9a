//! `ScriptedTransport` and a fault-injecting transport wrapper.
//!
//! [`ScriptedTransport`] answers webhook requests from a queue without any network, and
//! records what it was asked to send. [`FaultyTransport`] wraps any transport with a seeded
//! share of network failures and a fixed latency.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    EntropyExt, ErrorClass, Sent, SignedRequest, WebhookResponse, WebhookTransport,
};

use crate::clock::SeededEntropy;

/// A [`WebhookTransport`] that answers from a queue, then with a default answer (200 unless
/// set), and records every request. Clones share the queue and the record. An answer queued
/// with [`ScriptedTransport::push_sent`] carries an attempt detail, which
/// `send_detailed` returns (`send` only its response).
///
/// ```
/// use outboxkit_core::{WebhookResponse, WebhookTransport};
/// use outboxkit_testing::ScriptedTransport;
///
/// let transport = ScriptedTransport::new();
/// transport.push(WebhookResponse::answered(503, Some("5".into()), "busy"));
/// // the first send answers 503, every later one 200
/// assert_eq!(transport.count(), 0);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ScriptedTransport {
    state: Arc<Mutex<Script>>,
}

#[derive(Debug)]
struct Script {
    queue: VecDeque<Sent>,
    default: WebhookResponse,
    requests: Vec<SignedRequest>,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            queue: VecDeque::new(),
            default: WebhookResponse::answered(200, None, ""),
            requests: Vec::new(),
        }
    }
}

impl ScriptedTransport {
    /// A transport whose every answer is 200 until told otherwise.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, Script> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue one answer (answers are given in the order queued).
    pub fn push(&self, response: WebhookResponse) {
        self.push_sent(Sent {
            response,
            detail: None,
        });
    }

    /// Queue one answer with the attempt in full.
    pub fn push_sent(&self, sent: Sent) {
        self.state().queue.push_back(sent);
    }

    /// Queue several answers.
    pub fn push_many(&self, responses: impl IntoIterator<Item = WebhookResponse>) {
        self.state()
            .queue
            .extend(responses.into_iter().map(|response| Sent {
                response,
                detail: None,
            }));
    }

    /// The answer given once the queue is empty.
    pub fn set_default(&self, response: WebhookResponse) {
        self.state().default = response;
    }

    /// Every request sent so far, in order.
    pub fn requests(&self) -> Vec<SignedRequest> {
        self.state().requests.clone()
    }

    /// How many requests were sent.
    pub fn count(&self) -> usize {
        self.state().requests.len()
    }
}

#[async_trait]
impl WebhookTransport for ScriptedTransport {
    async fn send(&self, request: SignedRequest) -> WebhookResponse {
        self.send_detailed(request).await.response
    }

    async fn send_detailed(&self, request: SignedRequest) -> Sent {
        let mut s = self.state();
        s.requests.push(request);
        match s.queue.pop_front() {
            Some(sent) => sent,
            None => Sent {
                response: s.default.clone(),
                detail: None,
            },
        }
    }
}

/// Wraps a transport: each send first waits `latency`, then fails with
/// [`ErrorClass::Network`] with probability `error_ratio` (drawn from a seeded source, so a
/// run is reproducible) without calling the inner transport, and otherwise forwards.
#[derive(Debug)]
pub struct FaultyTransport<T> {
    inner: T,
    entropy: Arc<SeededEntropy>,
    error_ratio: f64,
    latency: Duration,
    injected: AtomicUsize,
}

impl<T: WebhookTransport> FaultyTransport<T> {
    /// Wrap `inner`; no faults and no latency until configured.
    pub fn new(inner: T, seed: u64) -> Self {
        FaultyTransport {
            inner,
            entropy: SeededEntropy::new(seed),
            error_ratio: 0.0,
            latency: Duration::ZERO,
            injected: AtomicUsize::new(0),
        }
    }

    /// The share of sends that fail, in `[0, 1]` (clamped; NaN counts as 0).
    pub fn error_ratio(mut self, ratio: f64) -> Self {
        self.error_ratio = if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, 1.0)
        };
        self
    }

    /// A wait before every send.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// How many failures were injected so far.
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::Relaxed)
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

impl<T: WebhookTransport> FaultyTransport<T> {
    /// Wait the latency, then `Some(failure)` when this send is to fail.
    async fn fault(&self) -> Option<WebhookResponse> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        if self.entropy.unit_sample() < self.error_ratio {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Some(WebhookResponse::Failed {
                class: ErrorClass::Network,
                detail: "injected network fault".into(),
            });
        }
        None
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: WebhookTransport> WebhookTransport for FaultyTransport<T> {
    async fn send(&self, request: SignedRequest) -> WebhookResponse {
        match self.fault().await {
            Some(failure) => failure,
            None => self.inner.send(request).await,
        }
    }

    /// An injected fault sent nothing: it keeps no detail.
    async fn send_detailed(&self, request: SignedRequest) -> Sent {
        match self.fault().await {
            Some(response) => Sent {
                response,
                detail: None,
            },
            None => self.inner.send_detailed(request).await,
        }
    }
}
