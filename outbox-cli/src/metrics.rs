//! `outbox relay --metrics-addr HOST:PORT`: `/metrics` (Prometheus text), `/healthz` (the
//! process is alive) and `/readyz` (the store answers and is migrated, and the broker sink,
//! when there is one, is connected).
//!
//! The figures come from `outboxkit_dispatch::MetricsObserver` through the `metrics` facade
//! into a Prometheus recorder installed here; the queue gauges are read from the store's
//! unfinished counts (`queue_stats`) at each scrape, which never read the finished history.
//! `/readyz` is a probe of constant cost: one read of the (small) consumers table, which
//! answers only when the store is reachable and its schema is in place. Nothing here prints
//! a URL, a secret or a payload.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use outboxkit_core::Store;
use tokio::net::TcpListener;

use crate::error::{CliError, CliResult};

/// How long `/readyz` and a scrape wait for the store.
const STORE_DEADLINE: Duration = Duration::from_secs(2);

/// Histogram buckets in seconds: 1 ms to 60 s.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Install the Prometheus recorder for this process (once), describe every family (HELP
/// text and unit) and set `outbox_build_info{version="…"} 1`.
pub fn install() -> CliResult<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| CliError::failed(format!("cannot set up metrics: {e}")))?
        .install_recorder()
        .map_err(|e| CliError::failed(format!("cannot set up metrics: {e}")))?;
    outboxkit_dispatch::MetricsObserver::describe();
    outboxkit_dispatch::MetricsObserver::build_info(env!("CARGO_PKG_VERSION"));
    Ok(handle)
}

/// The relay's broker sink, as `/readyz` reports it.
#[derive(Clone, Debug)]
pub struct Sink {
    name: String,
    broker: outboxkit_broker::Broker,
}

impl Sink {
    /// The sink `name` publishing through `broker`.
    pub fn new(name: &str, broker: outboxkit_broker::Broker) -> Self {
        Sink {
            name: name.to_owned(),
            broker,
        }
    }
}

struct State {
    handle: PrometheusHandle,
    store: Arc<dyn Store>,
    sink: Option<Sink>,
}

/// Bind `addr` and serve the three paths on a task of their own until the process exits.
/// Returns the bound address (useful with port 0).
pub async fn serve(
    addr: &str,
    handle: PrometheusHandle,
    store: Arc<dyn Store>,
    sink: Option<Sink>,
) -> CliResult<SocketAddr> {
    let addr: SocketAddr = addr.parse().map_err(|_| {
        CliError::usage(
            "invalid input: --metrics-addr: use HOST:PORT with an IP address (e.g. 0.0.0.0:9090)",
        )
    })?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on --metrics-addr: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot listen on --metrics-addr: {e}")))?;
    let state = Arc::new(State {
        handle,
        store,
        sink,
    });
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(answer(req, &state).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    Ok(bound)
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `call`'s answer within the deadline, or why not (a message without secrets).
async fn within_deadline<T>(
    call: impl std::future::Future<Output = outboxkit_core::Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(STORE_DEADLINE, call).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!(
            "the store did not answer within {} ms",
            STORE_DEADLINE.as_millis()
        )),
    }
}

async fn answer(req: Request<Incoming>, state: &State) -> Response<Full<Bytes>> {
    let (handle, store) = (&state.handle, &*state.store);
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "use GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => {
            match within_deadline(store.queue_stats()).await {
                Ok(s) => outboxkit_dispatch::record_stats(&s),
                Err(why) => tracing::warn!(error = %why, "queue gauges not refreshed"),
            }
            handle.run_upkeep();
            reply(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                handle.render(),
            )
        }
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => match (within_deadline(store.list_consumers()).await, &state.sink) {
            (Err(why), _) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("not ready: {why}\n"),
            ),
            // The relay runs and delivers webhooks and e-mail; the sink's deliveries wait
            // (without spending attempts) until the broker is back.
            (Ok(_), Some(sink)) if !sink.broker.is_connected() => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!(
                    "not ready: the broker sink {} is unavailable: the broker cannot be reached (webhooks and e-mail still deliver)\n",
                    sink.name
                ),
            ),
            (Ok(_), _) => reply(StatusCode::OK, TEXT, "ready\n".into()),
        },
        _ => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: use /metrics, /healthz or /readyz\n".into(),
        ),
    }
}
