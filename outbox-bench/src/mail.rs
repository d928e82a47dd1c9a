//! E-mail through `HttpMailer` to a local mail-API stand-in (the lean hyper server of
//! [`crate::webhook`], answering `{"id":…}` like a provider), beside raw `reqwest` POSTs of
//! the same request bodies with the same headers to the same stand-in, at concurrency 16.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use outboxkit_core::{DynStore, MessageStore, NewMessage, SystemClock, TenantId};
use outboxkit_dispatch::{Dispatcher, DispatcherConfig};
use outboxkit_http::{HttpMailer, HttpMailerConfig};
use outboxkit_testing::InMemoryStore;

use crate::common::{burn_down, chunks, err, BenchResult, Progress, TOPIC};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::webhook::Receiver;
use crate::Ctx;

/// What the stand-in answers: a provider's message id.
const ANSWER: &[u8] = br#"{"id":"msg_0123456789"}"#;

/// The API key both sides send.
const API_KEY: &str = "bench-key-0123456789abcdef";

/// Mail `i`: its recipient and the payload `PayloadComposer` reads.
fn mail(i: usize) -> (String, Vec<u8>) {
    let to = format!("customer-{:06}@example.com", i % 1_000_000);
    let payload = serde_json::json!({
        "subject": format!("Your order {i} has shipped"),
        "text": format!(
            "Hello,\n\nyour order {i} left our warehouse today and should arrive within \
             three days.\n\nThank you for shopping with us."
        ),
    });
    (to, payload.to_string().into_bytes())
}

/// The body `HttpMailer` sends for mail `i` (the same fields, the same order).
fn body(i: usize) -> Bytes {
    let (to, payload) = mail(i);
    let p: serde_json::Value = serde_json::from_slice(&payload).unwrap_or_default();
    let v = serde_json::json!({
        "to": to,
        "subject": p["subject"],
        "text": p["text"],
        "html": null,
        "reply_to": null,
        "from_name": null,
    });
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// The dispatcher's side: `n` e-mail deliveries burned down through `HttpMailer`.
async fn ours(url: &str, n: usize, c: usize) -> BenchResult<crate::common::BurnDown> {
    let store: Arc<DynStore> = Arc::new(InMemoryStore::new(Arc::new(SystemClock)));
    for ch in chunks(n, 1000) {
        let batch = ch
            .map(|i| {
                let (to, payload) = mail(i);
                NewMessage::raw(TOPIC, payload)
                    .tenant(TenantId::default().as_str())
                    .email(to)
            })
            .collect();
        store.enqueue_batch(batch).await.map_err(err("load"))?;
    }
    let mailer = HttpMailer::new(HttpMailerConfig {
        url: url.to_owned(),
        api_key: API_KEY.to_owned(),
        idempotent: true,
        ..HttpMailerConfig::default()
    })
    .map_err(err("mailer"))?;
    let progress = Progress::new(n as u64);
    let config = DispatcherConfig {
        batch_size: 100,
        concurrency: c,
        ..DispatcherConfig::default()
    };
    let d = Dispatcher::builder(store)
        .mailer(Arc::new(mailer))
        .config(config)
        .observer(progress.clone())
        .build()
        .map_err(err("dispatcher"))?;
    burn_down(&d, &progress, n as u64, None).await
}

/// The raw side: `c` tasks POSTing the prepared bodies with the mailer's headers.
async fn raw(url: &str, bodies: Arc<Vec<Bytes>>, c: usize) -> BenchResult<f64> {
    let client = outboxkit_http::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| format!("reqwest: {e}"))?;
    let auth = format!("Bearer {API_KEY}");
    let decorate: crate::webhook::Decorate = Arc::new(move |i, r| {
        r.header("authorization", &auth)
            .header("idempotency-key", format!("outbox-mail-{i:036}"))
    });
    crate::webhook::post_all(client, url, bodies, c, decorate).await
}

/// E-mail through `HttpMailer` at concurrency 16 (with `OUTBOX_BENCH_WEBHOOK_SIDE=ours` or
/// `raw`: that side alone, once, for a profiler).
pub async fn run(ctx: &Ctx) -> Vec<Row> {
    let n = ctx.scale.n(20_000);
    let reps = ctx.reps();
    let c = 16;
    let key = "mail-http-c16";
    let scenario = format!("e-mail through HttpMailer, concurrency {c}");
    let target = Target::MinRatio(0.7);
    let side = std::env::var("OUTBOX_BENCH_WEBHOOK_SIDE").ok();
    let r = async {
        let api = Receiver::answering(ANSWER)
            .await
            .map_err(|e| format!("stand-in: {e}"))?;
        let url = api.url_of("/v1/send");
        let bodies = Arc::new((0..n).map(body).collect::<Vec<_>>());
        if let Some(side) = side.as_deref() {
            let rate = match side.split(':').next() {
                Some("raw") => per_second(n as u64, raw(&url, bodies, c).await?),
                _ => ours(&url, n, c).await?.rate,
            };
            return Ok((rate, rate, 0.0));
        }
        let mut best: Option<crate::common::BurnDown> = None;
        let mut best_raw = f64::MAX;
        for _ in 0..reps {
            let b = ours(&url, n, c).await?;
            if best.as_ref().is_none_or(|x| b.rate > x.rate) {
                best = Some(b);
            }
            best_raw = best_raw.min(raw(&url, bodies.clone(), c).await?);
        }
        let seen = api.requests.load(Ordering::Relaxed);
        if seen != 2 * (reps * n) as u64 {
            return Err(format!("the stand-in saw {seen} requests"));
        }
        let b = best.ok_or("no repetition ran")?;
        Ok::<_, String>((b.rate, per_second(n as u64, best_raw), b.mean_batch))
    }
    .await;
    vec![match r {
        Ok((ours, raw, mean_batch)) => Row::measured(
            key,
            scenario,
            ctx.scale.label(n),
            Figure::requests(ours),
            Some(Figure::requests(raw)),
            target,
            format!(
                "ours: Dispatcher + HttpMailer (idempotent, PayloadComposer, literal \
                 recipients) burning down a backlog in InMemoryStore, batch 100, \
                 concurrency {c} (mean claim {mean_batch:.1}); raw: reqwest POSTs of the same \
                 JSON bodies with the same authorization, idempotency-key and content-type \
                 headers; stand-in: lean hyper server answering {{\"id\":…}}; best of {reps}"
            ),
        ),
        Err(e) => Row::not_run(key, scenario, target, Status::Error(e)),
    }]
}
