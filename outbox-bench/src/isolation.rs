//! Isolation (issue 23), on the in-memory store:
//!
//! - `isolation-hang`: two endpoints, 200 events each, concurrency 16, a 2 s webhook
//!   deadline: the healthy endpoint's drain time while the other endpoint accepts
//!   connections and never answers, ÷ the same with the other endpoint healthy.
//! - `isolation-tenants`: tenant A with a 100k backlog (a handler that takes 1 ms), tenant B
//!   enqueueing one event every 10 ms: B's enqueue → handler start p50/p99, ÷ the same
//!   with no backlog.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{
    DynStore, MessageStore, NewMessage, OsEntropy, PlaintextVault, Stopwatch, SystemClock, TenantId,
};
use outboxkit_dispatch::{
    Context, Dispatcher, DispatcherConfig, EndpointAdmin, HandlerOptions, HandlerResult,
    NewEndpoint,
};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::InMemoryStore;
use tokio::net::TcpListener;

use crate::common::{err, message, BenchResult};
use crate::report::{percentile, Figure, Row, Status, Target};
use crate::webhook::Receiver;
use crate::Ctx;

/// A port that accepts connections and never answers (it keeps them open).
struct Hanging {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hanging {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hanging {
    async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        Ok(Hanging { addr, task })
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }
}

/// The healthy endpoint's drain time in seconds, the other endpoint at `other`.
async fn drain(healthy: &Receiver, other: &str, n: usize) -> BenchResult<f64> {
    let store: Arc<DynStore> = Arc::new(InMemoryStore::new(Arc::new(SystemClock)));
    let admin = EndpointAdmin::new(
        store.clone(),
        Arc::new(PlaintextVault),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .with_url_policy(Arc::new(outboxkit_core::AnyUrl));
    for url in [healthy.url(), other.to_owned()] {
        admin
            .create(
                &TenantId::default(),
                NewEndpoint {
                    url,
                    ..NewEndpoint::default()
                },
            )
            .await
            .map_err(err("endpoint"))?;
    }
    store
        .enqueue_batch((0..n).map(message).collect())
        .await
        .map_err(err("load"))?;
    let policy = EgressPolicy::default().allow_http(true).allow_private(true);
    let transport = Arc::new(HttpTransport::new(policy).map_err(err("transport"))?);
    let d = Dispatcher::builder(store)
        .webhooks(transport, Arc::new(PlaintextVault))
        .config(DispatcherConfig {
            concurrency: 16,
            webhook_timeout: Duration::from_secs(2),
            lease: Duration::from_secs(32),
            shutdown_grace: Duration::ZERO,
            ..DispatcherConfig::default()
        })
        .build()
        .map_err(err("dispatcher"))?;
    let before = healthy.requests.load(Ordering::Relaxed);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let sw = Stopwatch::start();
    let run = tokio::spawn(async move {
        d.run(async {
            let _ = rx.await;
        })
        .await
    });
    let limit = Duration::from_secs(120);
    while healthy.requests.load(Ordering::Relaxed) < before + n as u64 {
        if sw.elapsed() > limit {
            return Err("the healthy endpoint did not drain within 120 s".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = sw.elapsed().as_secs_f64();
    let _ = tx.send(());
    run.await
        .map_err(|e| format!("run: {e}"))?
        .map_err(err("run"))?;
    Ok(secs)
}

/// Scenario (a).
pub async fn hang(ctx: &Ctx) -> Row {
    let key = "isolation-hang";
    let scenario = "healthy endpoint drain, other endpoint hanging ÷ healthy";
    let target = Target::MaxRatio(1.5);
    let n = 200;
    let reps = ctx.reps();
    let r = async {
        let healthy = Receiver::start()
            .await
            .map_err(|e| format!("receiver: {e}"))?;
        let other = Receiver::start()
            .await
            .map_err(|e| format!("receiver: {e}"))?;
        let hanging = Hanging::start()
            .await
            .map_err(|e| format!("hanging: {e}"))?;
        let (mut with_hang, mut without) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            without = without.min(drain(&healthy, &other.url(), n).await?);
            with_hang = with_hang.min(drain(&healthy, &hanging.url(), n).await?);
        }
        Ok::<_, String>((with_hang, without))
    }
    .await;
    match r {
        Ok((h, w)) => Row::measured(
            key,
            scenario,
            format!("{n} + {n}"),
            Figure::millis(h * 1000.0),
            Some(Figure::millis(w * 1000.0)),
            target,
            format!(
                "ours: time until the healthy endpoint has all {n} while the other accepts \
                 and never answers; baseline: the same with the other endpoint healthy; \
                 concurrency 16, webhook timeout 2 s, default per-endpoint cap (4) and \
                 breaker (5 failures, 5 s cool-down); in-memory store; best of {reps}"
            ),
        ),
        Err(e) => Row::not_run(key, scenario, target, Status::Error(e)),
    }
}

/// When each of B's events was enqueued and when its handler started, in seconds of one
/// stopwatch.
#[derive(Debug, Default)]
struct Starts {
    enqueued: Mutex<Vec<f64>>,
    started: Mutex<Vec<Option<f64>>>,
}

/// B's start latencies (ms) with `backlog` events of tenant A enqueued first.
async fn tenant_b(backlog: usize, events: usize) -> BenchResult<Vec<f64>> {
    let store: Arc<DynStore> = Arc::new(InMemoryStore::new(Arc::new(SystemClock)));
    let sw = Arc::new(Stopwatch::start());
    let starts = Arc::new(Starts {
        enqueued: Mutex::new(vec![0.0; events]),
        started: Mutex::new(vec![None; events]),
    });
    let a_done = Arc::new(AtomicU64::new(0));
    let handler = {
        let (sw, starts, a_done) = (sw.clone(), starts.clone(), a_done.clone());
        move |_ctx: Context, m: outboxkit_core::Message| {
            let (sw, starts, a_done) = (sw.clone(), starts.clone(), a_done.clone());
            async move {
                if m.tenant.as_str() == "b" {
                    let at = sw.elapsed().as_secs_f64();
                    let i: usize = std::str::from_utf8(&m.payload)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(usize::MAX);
                    if let Some(slot) = starts.started.lock().unwrap().get_mut(i) {
                        *slot = Some(at);
                    }
                } else {
                    // Tenant A's work takes a while.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    a_done.fetch_add(1, Ordering::Relaxed);
                }
                HandlerResult::Ok
            }
        }
    };
    let d = Dispatcher::builder(store.clone())
        .handler_with(
            crate::common::CONSUMER,
            "*",
            handler,
            HandlerOptions {
                concurrency: Some(64),
                ..HandlerOptions::default()
            },
        )
        .config(DispatcherConfig {
            concurrency: 64,
            batch_size: 100,
            poll_interval: Duration::from_millis(5),
            ..DispatcherConfig::default()
        })
        .build()
        .map_err(err("dispatcher"))?;
    d.register().await.map_err(err("register"))?;
    for start in (0..backlog).step_by(1000) {
        let end = (start + 1000).min(backlog);
        store
            .enqueue_batch((start..end).map(|i| message(i).tenant("a")).collect())
            .await
            .map_err(err("load"))?;
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = {
        let d = d.clone();
        tokio::spawn(async move {
            d.run(async {
                let _ = rx.await;
            })
            .await
        })
    };
    for i in 0..events {
        tokio::time::sleep(Duration::from_millis(10)).await;
        starts.enqueued.lock().unwrap()[i] = sw.elapsed().as_secs_f64();
        store
            .enqueue(NewMessage::raw("bench.b", i.to_string()).tenant("b"))
            .await
            .map_err(err("enqueue"))?;
    }
    let limit = Duration::from_secs(60);
    let t0 = Stopwatch::start();
    while starts.started.lock().unwrap().iter().any(Option::is_none) {
        if t0.elapsed() > limit {
            return Err("tenant B's events did not all start within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = tx.send(());
    run.await
        .map_err(|e| format!("run: {e}"))?
        .map_err(err("run"))?;
    if backlog > 0 && a_done.load(Ordering::Relaxed) as usize >= backlog {
        return Err("tenant A's backlog drained before B finished: not a backlog".into());
    }
    let enq = starts.enqueued.lock().unwrap().clone();
    let st = starts.started.lock().unwrap().clone();
    Ok(enq
        .iter()
        .zip(st)
        .map(|(e, s)| (s.unwrap_or(*e) - e).max(0.0) * 1000.0)
        .collect())
}

/// Scenario (b): two rows, p50 and p99.
pub async fn tenants(ctx: &Ctx) -> Vec<Row> {
    let backlog = ctx.scale.n(100_000);
    let events = 200;
    let target = Target::MaxRatio(3.0);
    let r = async {
        let with = tenant_b(backlog, events).await?;
        let without = tenant_b(0, events).await?;
        Ok::<_, String>((with, without))
    }
    .await;
    let mut rows = Vec::new();
    for (p, name) in [(50.0, "p50"), (99.0, "p99")] {
        let key = format!("isolation-tenants-{name}");
        let scenario = format!("tenant B start latency {name}, A's backlog ÷ none");
        rows.push(match &r {
            Ok((with, without)) => Row::measured(
                &key,
                scenario,
                format!("{} + {events}", ctx.scale.label(backlog)),
                Figure::millis(percentile(with, p).unwrap_or(0.0)),
                Some(Figure::millis(percentile(without, p).unwrap_or(0.0))),
                target,
                format!(
                    "ours: tenant B enqueues {events} events 10 ms apart while tenant A's \
                     backlog of {backlog} (handler 1 ms each) is being burned down; \
                     baseline: the same with no backlog; enqueue → handler start; \
                     concurrency 64, batch 100, fair claiming; in-memory store"
                ),
            ),
            Err(e) => Row::not_run(&key, scenario, target, Status::Error(e.clone())),
        });
    }
    rows
}
