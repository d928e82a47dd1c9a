//! The broker channel: the dispatcher publishing a backlog to NATS JetStream through
//! `NatsTransport` (each publish waits for its `PubAck`) beside raw async-nats JetStream
//! publishes of the same bodies and headers, awaiting every ack, at the same concurrency.
//! Both sides publish into a memory stream of their own, created and removed here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream::{Config, StorageType};
use bytes::Bytes;
use outboxkit_core::{Clock, DynStore, Envelope, MessageStore, Stopwatch, SystemClock};
use outboxkit_dispatch::{BrokerSink, Dispatcher, DispatcherConfig};
use outboxkit_testing::InMemoryStore;
use tokio::task::JoinSet;

use crate::common::{
    burn_down, chunks, err, message, payload, secs, unique, BenchResult, Progress, TOPIC,
};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::Ctx;

/// Whether JetStream answers at `url`.
pub async fn probe(url: &str) -> Option<String> {
    let t = outboxkit_broker::NatsTransport::connect(url).await.ok()?;
    let info = t.client().server_info();
    Some(info.version)
}

/// A memory stream on `<name>.>` (the name has no dots).
async fn stream(js: &async_nats::jetstream::Context, name: &str) -> BenchResult<()> {
    js.create_stream(Config {
        name: name.to_owned(),
        subjects: vec![format!("{name}.>")],
        storage: StorageType::Memory,
        duplicate_window: Duration::from_secs(120),
        ..Config::default()
    })
    .await
    .map(|_| ())
    .map_err(|e| format!("create stream: {e}"))
}

async fn stored(js: &async_nats::jetstream::Context, name: &str) -> BenchResult<u64> {
    let mut s = js
        .get_stream(name)
        .await
        .map_err(|e| format!("get stream: {e}"))?;
    Ok(s.info()
        .await
        .map_err(|e| format!("stream info: {e}"))?
        .state
        .messages)
}

/// Ours: a backlog of `n` messages in the in-memory store, burned down by the dispatcher
/// through one broker sink at concurrency `c`.
async fn ours(
    t: &outboxkit_broker::NatsTransport,
    n: usize,
    c: usize,
) -> BenchResult<crate::common::BurnDown> {
    let name = format!("outbox-bench-ours-{}", unique());
    stream(t.jetstream(), &name).await?;
    let store: Arc<DynStore> = Arc::new(InMemoryStore::new(Arc::new(SystemClock)));
    let progress = Progress::new(n as u64);
    let sink = BrokerSink::new(Arc::new(t.clone()), &format!("{name}.{{topic}}"))
        .map_err(err("sink"))?
        .concurrency(c);
    let d = Dispatcher::builder(store.clone())
        .broker("bench-broker", "*", sink)
        .config(DispatcherConfig {
            batch_size: 100,
            concurrency: c,
            ..DispatcherConfig::default()
        })
        .observer(progress.clone())
        .build()
        .map_err(err("dispatcher"))?;
    d.register().await.map_err(err("register"))?;
    for ch in chunks(n, 1000) {
        store
            .enqueue_batch(ch.map(message).collect())
            .await
            .map_err(err("load"))?;
    }
    let b = burn_down(&d, &progress, n as u64, None).await?;
    let got = stored(t.jetstream(), &name).await?;
    let _ = t.jetstream().delete_stream(&name).await;
    if got != n as u64 {
        return Err(format!("the stream holds {got} of {n} messages"));
    }
    Ok(b)
}

/// Raw: `c` tasks publishing the prepared bodies with the same headers and a
/// `Nats-Msg-Id`, each awaiting its ack.
async fn raw(
    t: &outboxkit_broker::NatsTransport,
    bodies: Arc<Vec<Bytes>>,
    c: usize,
) -> BenchResult<f64> {
    let name = format!("outbox-bench-raw-{}", unique());
    stream(t.jetstream(), &name).await?;
    let js = t.jetstream().clone();
    let next = Arc::new(AtomicUsize::new(0));
    let subject = format!("{name}.{TOPIC}");
    let sw = Stopwatch::start();
    let mut set = JoinSet::new();
    for _ in 0..c {
        let (js, bodies, next, subject) =
            (js.clone(), bodies.clone(), next.clone(), subject.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = bodies.get(i) else {
                    return Ok::<(), String>(());
                };
                let id = format!("raw-{i}");
                let mut h = async_nats::HeaderMap::new();
                h.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
                h.insert("outbox-message-id", id.as_str());
                h.insert("outbox-topic", TOPIC);
                h.insert("outbox-tenant", "default");
                h.insert("content-type", "application/json");
                let ack = js
                    .publish_with_headers(subject.clone(), h, body.clone())
                    .await
                    .map_err(|e| format!("publish: {e}"))?;
                ack.await.map_err(|e| format!("ack: {e}"))?;
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| format!("task: {e}"))??;
    }
    let s = secs(&sw);
    let got = stored(&js, &name).await?;
    let _ = js.delete_stream(&name).await;
    if got != bodies.len() as u64 {
        return Err(format!(
            "the raw stream holds {got} of {} messages",
            bodies.len()
        ));
    }
    Ok(s)
}

fn bodies(n: usize) -> Vec<Bytes> {
    let now = SystemClock.now().to_rfc3339();
    (0..n)
        .map(|i| {
            let e = Envelope {
                kind: TOPIC.to_owned(),
                timestamp: now.clone(),
                data: String::from_utf8_lossy(&payload(i)).into_owned(),
            };
            Bytes::from(e.to_bytes())
        })
        .collect()
}

/// Outbox → JetStream vs raw async-nats publishes with acks, at concurrency 64.
pub async fn run(ctx: &Ctx) -> Vec<Row> {
    let n = ctx.scale.n(20_000);
    let reps = ctx.reps();
    let c = 64usize;
    let target = Target::MinRatio(0.7);
    let key = "broker-nats-c64";
    let scenario = format!("outbox → NATS JetStream, concurrency {c}");
    let r = async {
        let t = outboxkit_broker::NatsTransport::connect(&ctx.nats_url)
            .await
            .map_err(err("nats"))?;
        let body_set = Arc::new(bodies(n));
        let mut best: Option<crate::common::BurnDown> = None;
        let mut best_raw = f64::MAX;
        for _ in 0..reps {
            let b = ours(&t, n, c).await?;
            if best.as_ref().is_none_or(|x| b.rate > x.rate) {
                best = Some(b);
            }
            best_raw = best_raw.min(raw(&t, body_set.clone(), c).await?);
        }
        let b = best.ok_or("no repetition ran")?;
        Ok::<_, String>((b, per_second(n as u64, best_raw)))
    }
    .await;
    vec![match r {
        Ok((b, raw)) => Row::measured(
            key,
            scenario,
            ctx.scale.label(n),
            Figure::rate(b.rate),
            Some(Figure::rate(raw)),
            target,
            format!(
                "ours: Dispatcher + NatsTransport burning down a backlog in InMemoryStore, \
                 batch 100, concurrency {c} (mean claim {:.1}), every publish awaiting its \
                 PubAck; raw: async-nats JetStream publishes of the same bodies and headers \
                 by {c} tasks, each awaiting its ack; memory streams; best of {reps}",
                b.mean_batch,
            ),
        ),
        Err(e) => Row::not_run(key, scenario, target, Status::Error(e)),
    }]
}
