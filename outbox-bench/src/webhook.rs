//! Webhook delivery to a local keep-alive receiver at concurrency 1, 16 and 64: the
//! dispatcher with `HttpTransport` beside raw `reqwest` POSTs of the same bodies at the same
//! concurrency, both to the same lean hyper server of this crate (it only reads the body and
//! answers 200, so its own bookkeeping stays out of both figures).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use outboxkit_core::{
    Clock, DynStore, DynWebhookTransport, Envelope, MessageStore, OsEntropy, PlaintextVault,
    SignedRequest, Stopwatch, SystemClock, TenantId, WebhookResponse, WebhookTransport,
};
use outboxkit_dispatch::{Dispatcher, DispatcherConfig, EndpointAdmin, NewEndpoint};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::InMemoryStore;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::common::TOPIC;
use crate::common::{burn_down, chunks, err, message, payload, secs, BenchResult, Progress};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::Ctx;

/// A minimal HTTP/1.1 keep-alive server on a loopback port: reads each body, answers 200.
pub(crate) struct Receiver {
    addr: SocketAddr,
    pub(crate) requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub(crate) async fn start() -> std::io::Result<Self> {
        Self::answering(b"").await
    }

    /// As [`Receiver::start`], answering every request with `body` (a JSON body when it is
    /// not empty).
    pub(crate) async fn answering(body: &'static [u8]) -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let count = requests.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let count = count.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let count = count.clone();
                        async move {
                            let _ = req.into_body().collect().await;
                            count.fetch_add(1, Ordering::Relaxed);
                            let mut r = Response::new(Full::new(Bytes::from_static(body)));
                            if !body.is_empty() {
                                r.headers_mut().insert(
                                    hyper::header::CONTENT_TYPE,
                                    hyper::header::HeaderValue::from_static("application/json"),
                                );
                            }
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Receiver {
            addr,
            requests,
            task,
        })
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// The URL of `path` on this server.
    pub(crate) fn url_of(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// A transport that answers 200 at once: the dispatcher and the store without HTTP, to see
/// how much of our time is not the network path.
#[derive(Debug)]
pub(crate) struct NullTransport;

#[async_trait::async_trait]
impl WebhookTransport for NullTransport {
    async fn send(&self, request: SignedRequest) -> WebhookResponse {
        std::hint::black_box(&request.body);
        WebhookResponse::answered(200, None, "")
    }
}

/// The real transport with the loopback-allowing egress policy.
pub(crate) fn http() -> BenchResult<Arc<DynWebhookTransport>> {
    let policy = EgressPolicy::default().allow_http(true).allow_private(true);
    Ok(Arc::new(
        HttpTransport::new(policy).map_err(err("transport"))?,
    ))
}

/// Endpoints the webhook rows spread their deliveries over (every message goes to each):
/// with the relay's default per-endpoint cap (a quarter of the concurrency) they admit
/// twice the concurrency together, so the dispatcher's concurrency, as raw's, is the limit.
pub(crate) const ENDPOINTS: usize = 8;

/// The dispatcher's side: `n` webhook deliveries (`n / ENDPOINTS` messages, each to every
/// endpoint) to `url`, burned down at concurrency `c` through `transport`, with the relay's
/// defaults otherwise (the per-endpoint cap and the circuit breaker on).
async fn ours(
    url: &str,
    n: usize,
    c: usize,
    transport: Arc<DynWebhookTransport>,
) -> BenchResult<crate::common::BurnDown> {
    let (d, progress, n) = prepare(url, n, c, ENDPOINTS, transport).await?;
    burn_down(&d, &progress, n, None).await
}

/// One endpoint with the relay's defaults: the per-endpoint cap is a quarter of `c`.
async fn ours_one_endpoint(
    url: &str,
    n: usize,
    c: usize,
    transport: Arc<DynWebhookTransport>,
) -> BenchResult<crate::common::BurnDown> {
    let (d, progress, n) = prepare(url, n, c, 1, transport).await?;
    burn_down(&d, &progress, n, None).await
}

/// The in-memory store with `endpoints` endpoints at `url` and a backlog of about `n`
/// deliveries (`n / endpoints` messages, at least one), and the dispatcher that burns it
/// down at concurrency `c` through `transport` with `DispatcherConfig`'s defaults
/// otherwise (batch 100, the per-endpoint cap, the circuit breaker). Returns the number of
/// deliveries.
pub(crate) async fn prepare(
    url: &str,
    n: usize,
    c: usize,
    endpoints: usize,
    transport: Arc<DynWebhookTransport>,
) -> BenchResult<(Dispatcher, Arc<Progress>, u64)> {
    let store: Arc<DynStore> = Arc::new(InMemoryStore::new(Arc::new(SystemClock)));
    // The receiver is on loopback over http.
    let admin = EndpointAdmin::new(
        store.clone(),
        Arc::new(PlaintextVault),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .with_url_policy(Arc::new(outboxkit_core::AnyUrl));
    for _ in 0..endpoints.max(1) {
        admin
            .create(
                &TenantId::default(),
                NewEndpoint {
                    url: url.to_owned(),
                    ..NewEndpoint::default()
                },
            )
            .await
            .map_err(err("endpoint"))?;
    }
    let messages = (n / endpoints.max(1)).max(1);
    for ch in chunks(messages, 1000) {
        store
            .enqueue_batch(ch.map(message).collect())
            .await
            .map_err(err("load"))?;
    }
    let deliveries = (messages * endpoints.max(1)) as u64;
    let progress = Progress::new(deliveries);
    let config = DispatcherConfig {
        concurrency: c,
        ..DispatcherConfig::default()
    };
    let d = Dispatcher::builder(store)
        .webhooks(transport, Arc::new(PlaintextVault))
        .config(config)
        .observer(progress.clone())
        .build()
        .map_err(err("dispatcher"))?;
    Ok((d, progress, deliveries))
}

/// The raw side: `c` tasks POSTing the prepared bodies with one reqwest client.
async fn raw(url: &str, bodies: Arc<Vec<Bytes>>, c: usize) -> BenchResult<f64> {
    post_all(raw_client()?, url, bodies, c, Arc::new(|_, r| r)).await
}

/// The raw side's client: reqwest with rustls, no redirects, no proxy, `TCP_NODELAY`.
pub(crate) fn raw_client() -> BenchResult<reqwest::Client> {
    outboxkit_http::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .tcp_nodelay(true)
        .build()
        .map_err(|e| format!("reqwest: {e}"))
}

/// Adds a raw request's own headers (beyond `content-type`) for body number `i`.
pub(crate) type Decorate =
    Arc<dyn Fn(usize, reqwest::RequestBuilder) -> reqwest::RequestBuilder + Send + Sync>;

/// `c` tasks POSTing `bodies` (JSON) to `url` with `client`, each body once, until all are
/// sent; every answer must be a 2xx and is read to the end. Returns the seconds it took.
pub(crate) async fn post_all(
    client: reqwest::Client,
    url: &str,
    bodies: Arc<Vec<Bytes>>,
    c: usize,
    decorate: Decorate,
) -> BenchResult<f64> {
    let next = Arc::new(AtomicUsize::new(0));
    let sw = Stopwatch::start();
    let mut set = JoinSet::new();
    for _ in 0..c {
        let (client, bodies, next, url, decorate) = (
            client.clone(),
            bodies.clone(),
            next.clone(),
            url.to_owned(),
            decorate.clone(),
        );
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else {
                    return Ok::<(), String>(());
                };
                let r = decorate(i, client.post(&url))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .map_err(|e| format!("post: {e}"))?;
                if !r.status().is_success() {
                    return Err(format!("status {}", r.status()));
                }
                let _ = r.bytes().await;
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| format!("task: {e}"))??;
    }
    Ok(secs(&sw))
}

/// The envelope bodies the dispatcher sends for messages `0..n`.
pub(crate) fn bodies(n: usize) -> Vec<Bytes> {
    let now = SystemClock.now().to_rfc3339();
    (0..n)
        .map(|i| {
            let e = Envelope {
                kind: TOPIC.to_owned(),
                timestamp: now.clone(),
                // The payload is JSON text: the envelope embeds it byte for byte.
                data: String::from_utf8(payload(i)).unwrap_or_default(),
            };
            Bytes::from(e.to_bytes())
        })
        .collect()
}

/// Which side a profiling run measures (`OUTBOX_BENCH_WEBHOOK_SIDE=SIDE[:C]`): `ours`,
/// `raw` or `null` runs only that side, once, at concurrency `C` (default: 1, 16 and 64 in
/// turn), so a profiler (`valgrind --tool=callgrind`, `perf`) sees one side's work alone.
/// Unset: every side, alternated.
fn side() -> Option<(String, Vec<usize>)> {
    let v = std::env::var("OUTBOX_BENCH_WEBHOOK_SIDE").ok()?;
    Some(match v.split_once(':') {
        Some((side, c)) => (side.to_owned(), vec![c.parse().unwrap_or(1)]),
        None => (v, vec![1, 16, 64]),
    })
}

/// The issue 19 targets: ≥ 60 % of raw at concurrency 1, ≥ 75 % at 16 and 64.
fn target(c: usize) -> Target {
    if c == 1 {
        Target::MinRatio(0.6)
    } else {
        Target::MinRatio(0.75)
    }
}

/// Webhook delivery at concurrency 1, 16 and 64.
pub async fn run(ctx: &Ctx) -> Vec<Row> {
    // Every message goes to each endpoint: a whole number of messages.
    let n = (ctx.scale.n(20_000) / ENDPOINTS).max(1) * ENDPOINTS;
    let reps = ctx.reps();
    let mut rows = Vec::new();
    if let Some((side, cs)) = side() {
        for c in cs {
            rows.push(profile_side(&side, n, c).await);
        }
        return rows;
    }
    for c in [1usize, 16, 64] {
        let key = format!("webhook-c{c}");
        let scenario = format!("webhook delivery, concurrency {c}");
        let r = async {
            let receiver = Receiver::start()
                .await
                .map_err(|e| format!("receiver: {e}"))?;
            let url = receiver.url();
            let body_set = Arc::new(bodies(n));
            let mut best: Option<crate::common::BurnDown> = None;
            let mut best_raw = f64::MAX;
            for _ in 0..reps {
                let b = ours(&url, n, c, http()?).await?;
                if best.as_ref().is_none_or(|x| b.rate > x.rate) {
                    best = Some(b);
                }
                best_raw = best_raw.min(raw(&url, body_set.clone(), c).await?);
            }
            let seen = receiver.requests.load(Ordering::Relaxed);
            if seen != 2 * (reps * n) as u64 {
                return Err(format!("the receiver saw {seen} requests"));
            }
            let null = ours(&url, n, c, Arc::new(NullTransport)).await?;
            let b = best.ok_or("no repetition ran")?;
            Ok::<_, String>((b, per_second(n as u64, best_raw), null.rate))
        }
        .await;
        match r {
            Ok((b, raw, null)) => {
                rows.push(Row::measured(
                    &key,
                    scenario,
                    ctx.scale.label(n),
                    Figure::requests(b.rate),
                    Some(Figure::requests(raw)),
                    target(c),
                    format!(
                        "ours: Dispatcher + HttpTransport (signed, loopback allowed) burning \
                         down a backlog in InMemoryStore with the relay's defaults (batch 100, \
                         per-endpoint cap a quarter of the concurrency, circuit breaker on), \
                         concurrency {c}, {ENDPOINTS} endpoints on the receiver (mean claim \
                         {:.1}, {:.2} claims per delivery); the same with a no-op transport: \
                         {}; raw: reqwest POSTs of the same bodies; receiver: lean hyper \
                         server; best of {reps}",
                        b.mean_batch,
                        b.claims_per_delivery,
                        Figure::requests(null).human(),
                    ),
                ));
                if c == 1 {
                    rows.push(Row::measured(
                        "webhook-null-c1",
                        "dispatcher with a no-op transport vs raw reqwest, concurrency 1"
                            .to_owned(),
                        ctx.scale.label(n),
                        Figure::requests(null),
                        Some(Figure::requests(raw)),
                        Target::MinRatio(4.0),
                        "ours: the webhook row's dispatcher and store with a transport that \
                         answers 200 at once (the machinery around the request); raw: the \
                         webhook row's raw reqwest POSTs; a ratio of 4 means the machinery \
                         costs a quarter of a request"
                            .to_owned(),
                    ));
                }
            }
            Err(e) => rows.push(Row::not_run(&key, scenario, target(c), Status::Error(e))),
        }
    }
    rows
}

/// One side alone, once, at concurrency `c` (profiling; see [`side`]).
async fn profile_side(side: &str, n: usize, c: usize) -> Row {
    let key = format!("webhook-{side}-c{c}");
    let scenario = format!("webhook {side} side alone, concurrency {c} (profiling)");
    let r = async {
        let receiver = Receiver::start()
            .await
            .map_err(|e| format!("receiver: {e}"))?;
        let url = receiver.url();
        match side {
            "ours" => Ok(ours(&url, n, c, http()?).await?.rate),
            "null" => Ok(ours(&url, n, c, Arc::new(NullTransport)).await?.rate),
            "raw" => {
                let secs = raw(&url, Arc::new(bodies(n)), c).await?;
                Ok(per_second(n as u64, secs))
            }
            other => Err(format!(
                "OUTBOX_BENCH_WEBHOOK_SIDE={other}: expected ours, raw or null"
            )),
        }
    }
    .await;
    match r {
        Ok(rate) => Row::measured(
            &key,
            scenario,
            n.to_string(),
            Figure::requests(rate),
            None,
            Target::None,
            "one side only (OUTBOX_BENCH_WEBHOOK_SIDE)".to_owned(),
        ),
        Err(e) => Row::not_run(&key, scenario, Target::None, Status::Error(e)),
    }
}

/// The relay's defaults (batch 100, concurrency 64, the default per-endpoint cap of 16) on
/// a backlog to one endpoint: how many claims each delivery costs. Above 1 means deliveries
/// were claimed only to be handed back (the cap) and claimed again.
pub async fn relay_defaults(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(2_000);
    let key = "webhook-relay-defaults";
    let scenario = "one endpoint, the relay's defaults (c = 64, cap 16): claims per delivery";
    let r = async {
        let receiver = Receiver::start()
            .await
            .map_err(|e| format!("receiver: {e}"))?;
        ours_one_endpoint(&receiver.url(), n, 64, http()?).await
    }
    .await;
    match r {
        Ok(b) => Row::measured(
            key,
            scenario,
            ctx.scale.label(n),
            Figure::claims(b.claims_per_delivery),
            None,
            Target::AtMost(1.1),
            format!(
                "Dispatcher + HttpTransport over InMemoryStore with DispatcherConfig's defaults \
                 (the relay's: batch 100, concurrency 64, endpoint_concurrency a quarter of it) \
                 to one lean hyper receiver; deliveries claimed ÷ deliveries settled; {} \
                 (mean claim {:.1})",
                Figure::requests(b.rate).human(),
                b.mean_batch
            ),
        ),
        Err(e) => Row::not_run(key, scenario, Target::AtMost(1.1), Status::Error(e)),
    }
}
