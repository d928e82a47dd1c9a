//! `WebhookReceiver`: a real HTTP server on a loopback port that records and verifies
//! Standard Webhooks requests and answers a scripted sequence.
//!
//! The receiver speaks HTTP/1.1 with keep-alive on `127.0.0.1` (an ephemeral port). Each
//! request is read whole and recorded — with its signature check when secrets are set —
//! before it is answered, so a test sees every request, including those answered with
//! [`Reply::Reset`]. Answers come from a queue ([`WebhookReceiver::script`]), then from the
//! standing answer (200, or the status given to [`WebhookReceiver::refuse`]).

mod serve;

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use outboxkit_core::signing::DEFAULT_TOLERANCE;
use outboxkit_core::{DynClock, HeaderNames, Stopwatch, SystemClock, VerifyError, WebhookSecret};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One answer of the receiver.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// This status and an empty body.
    Status(u16),
    /// This status and a `Retry-After` header with this value, verbatim.
    RetryAfter(u16, String),
    /// Wait, then answer this status.
    Delay(Duration, u16),
    /// Send the status line and headers (a chunked body), then never send the body: the
    /// client waits until it gives up.
    StallAfterHeaders(u16),
    /// This status and a streamed body of this many bytes (`content-length` set).
    HugeBody(u16, usize),
    /// This status and a chunked body of this many bytes that never ends: a client that
    /// reads to the end waits until it gives up; one that stops at a cap returns.
    EndlessBody(u16, usize),
    /// This (3xx) status with a `Location` header.
    Redirect(u16, String),
    /// Close the connection abruptly (TCP reset) without answering.
    Reset,
    /// This status and this body.
    Body(u16, String),
}

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub struct ReceivedRequest {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// Every header, names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// When it arrived, measured from the receiver's start.
    pub elapsed: Duration,
    /// When it arrived by the receiver's clock (see [`WebhookReceiver::with_clock`]).
    pub at: outboxkit_core::Timestamp,
    /// The Standard Webhooks verification against the receiver's secrets; `None` when no
    /// secrets are set.
    pub signature: Option<Result<(), VerifyError>>,
    /// The `webhook-id` header.
    pub webhook_id: Option<String>,
}

impl ReceivedRequest {
    /// A header's value (name compared case-insensitively; the first one when repeated).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Whether secrets were set and the signature verified.
    pub fn verified(&self) -> bool {
        matches!(self.signature, Some(Ok(())))
    }
}

/// A webhook receiver on a loopback port for tests. Clones share the script and the
/// record; the server stops on [`WebhookReceiver::shutdown`] or when the last clone drops.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use outboxkit_testing::{Reply, WebhookReceiver};
///
/// let receiver = WebhookReceiver::start().await?;
/// receiver.script([Reply::Status(503), Reply::RetryAfter(429, "7".into())]);
/// let url = receiver.url(); // http://127.0.0.1:PORT/hook
/// // ... deliver to `url` ...
/// receiver.wait_for(3, std::time::Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WebhookReceiver {
    shared: Arc<Shared>,
    guard: Arc<StopGuard>,
}

/// The state the server tasks and every handle share.
pub(crate) struct Shared {
    addr: SocketAddr,
    started: Stopwatch,
    state: Mutex<State>,
    count: watch::Sender<usize>,
    connections: AtomicUsize,
    /// Requests being answered now, and the most there ever were at once.
    pub(crate) in_flight: AtomicUsize,
    pub(crate) max_in_flight: AtomicUsize,
}

struct State {
    script: VecDeque<Reply>,
    standing: Reply,
    secrets: Vec<WebhookSecret>,
    clock: Arc<DynClock>,
    requests: Vec<ReceivedRequest>,
}

/// Stops the server when the last handle drops.
struct StopGuard(watch::Sender<bool>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

impl WebhookReceiver {
    /// Bind `127.0.0.1:0` and start serving. Needs a Tokio runtime.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Bind `addr` (e.g. a fixed port for `outbox listen`) and start serving.
    pub async fn start_on(addr: std::net::SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            addr,
            started: Stopwatch::start(),
            state: Mutex::new(State {
                script: VecDeque::new(),
                standing: Reply::Status(200),
                secrets: Vec::new(),
                clock: Arc::new(SystemClock),
                requests: Vec::new(),
            }),
            count: watch::channel(0).0,
            connections: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let (stop, stop_rx) = watch::channel(false);
        tokio::spawn(serve::accept_loop(listener, shared.clone(), stop_rx));
        Ok(WebhookReceiver {
            shared,
            guard: Arc::new(StopGuard(stop)),
        })
    }

    /// `http://127.0.0.1:PORT/hook`.
    pub fn url(&self) -> String {
        self.url_for("/hook")
    }

    /// `http://127.0.0.1:PORT` followed by `path` (a leading `/` is added when missing).
    pub fn url_for(&self, path: &str) -> String {
        let slash = if path.starts_with('/') { "" } else { "/" };
        format!("http://{}{slash}{path}", self.shared.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Verify every later request against these secrets (any one may match); an empty list
    /// turns verification off.
    pub fn with_secrets(self, secrets: Vec<WebhookSecret>) -> Self {
        self.set_secrets(secrets);
        self
    }

    /// Check signature timestamps against this clock, and stamp [`ReceivedRequest::at`] with
    /// it, instead of the system clock (for senders driven by a `ManualClock`).
    pub fn with_clock(self, clock: Arc<DynClock>) -> Self {
        self.shared.state().clock = clock;
        self
    }

    /// Replace the secrets used for verification.
    pub fn set_secrets(&self, secrets: Vec<WebhookSecret>) {
        self.shared.state().secrets = secrets;
    }

    /// Queue answers, one per request, given before the standing answer.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.state().script.extend(replies);
    }

    /// Make the standing answer this status.
    pub fn refuse(&self, status: u16) {
        self.shared.state().standing = Reply::Status(status);
    }

    /// Make the standing answer 200 again (queued answers are kept).
    pub fn heal(&self) {
        self.shared.state().standing = Reply::Status(200);
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.shared.state().requests.clone()
    }

    /// How many requests arrived.
    pub fn count(&self) -> usize {
        *self.shared.count.borrow()
    }

    /// How many TCP connections were accepted (with keep-alive, fewer than requests).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// The most requests that were being answered at once (a [`Reply::Delay`] keeps one open
    /// while it waits).
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Wait until at least `n` requests arrived; false when `timeout` passed first.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let mut rx = self.shared.count.subscribe();
        let reached = async move { rx.wait_for(|c| *c >= n).await.is_ok() };
        tokio::time::timeout(timeout, reached)
            .await
            .unwrap_or(false)
    }

    /// Stop accepting and close every open connection (for every clone).
    pub fn shutdown(&self) {
        self.guard.0.send_replace(true);
    }
}

impl fmt::Debug for WebhookReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookReceiver")
            .field("addr", &self.shared.addr)
            .field("requests", &self.count())
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Verify, record, and pick the answer for one request.
    pub(crate) fn record(
        &self,
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Reply {
        let elapsed = self.started.elapsed();
        let webhook_id = lookup(&headers, "webhook-id").map(str::to_owned);
        let mut s = self.state();
        let signature = if s.secrets.is_empty() {
            None
        } else {
            let secrets: Vec<&WebhookSecret> = s.secrets.iter().collect();
            Some(outboxkit_core::verify(
                &secrets,
                &HeaderNames::default(),
                |n| lookup(&headers, n),
                &body,
                s.clock.now(),
                DEFAULT_TOLERANCE,
            ))
        };
        let at = s.clock.now();
        s.requests.push(ReceivedRequest {
            method,
            path,
            headers,
            body,
            elapsed,
            at,
            signature,
            webhook_id,
        });
        let count = s.requests.len();
        let reply = s.script.pop_front().unwrap_or_else(|| s.standing.clone());
        drop(s);
        self.count.send_replace(count);
        reply
    }
}

fn lookup<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}
