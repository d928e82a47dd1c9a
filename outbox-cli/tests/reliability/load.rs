//! Part 4, **Load.** Deliveries enqueued by 8 concurrent writers — one message per `enqueue`,
//! each in its own transaction, as an application would — while three relays drain them.
//! Nothing may be lost; the enqueue rate, the end-to-end throughput and each relay's peak
//! RSS (`VmHWM`, read just before the relays are stopped) are reported, never asserted.
//!
//! Scale: 20,000 deliveries per store by default (the whole suite must fit in `cargo test
//! --workspace` on 2 cores, on debug builds); `OUTBOX_RELIABILITY_FULL=1` runs the issue's
//! 50,000.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{NewMessage, Stopwatch, Store};
use outboxkit_testing::WebhookReceiver;
use tokio::task::JoinSet;

use crate::audit::{all_deliveries, check_at_least_once, wait_drained};
use crate::backend::{Backend, Kind};
use crate::relay::{fast_flags, Workers};

const WRITERS: u64 = 8;

fn size() -> u64 {
    if crate::full() {
        50_000
    } else {
        20_000
    }
}

/// Enqueue messages `w, w + WRITERS, …` below `n`, one per call.
async fn writer(store: Arc<dyn Store>, w: u64, n: u64, marker: String) {
    let mut seq = w;
    while seq < n {
        let message = NewMessage::new(
            "rel.load",
            serde_json::json!({ "seq": seq, "marker": marker }),
        );
        let mut tries = 0;
        loop {
            match store.enqueue(message.clone()).await {
                Ok(_) => break,
                Err(e) if e.is_retryable() && tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("writer {w}: enqueue failed: {e} ({e:?})"),
            }
        }
        seq += WRITERS;
    }
}

async fn scenario(kind: Kind) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("load/{}", kind.name());
    let n = size();
    let receiver = WebhookReceiver::start().await.expect("start the receiver");
    let (_, secret) = b.endpoint(&receiver.url()).await;
    receiver.set_secrets(vec![secret]);
    let marker = crate::marker("load");

    let mut workers = Workers::start(&b, 3, fast_flags());
    let clock = Stopwatch::start();
    let mut writers = JoinSet::new();
    for w in 0..WRITERS {
        writers.spawn(writer(b.store.clone(), w, n, marker.clone()));
    }
    while let Some(r) = writers.join_next().await {
        r.expect("a writer task");
    }
    let enqueued_in = clock.elapsed();
    let (s, ok) = wait_drained(&*b.store, n, Duration::from_secs(300)).await;
    let drained_in = clock.elapsed();
    let rss = workers.peak_rss_kib();
    if let Err(e) = workers.check_alive() {
        panic!("[{name}] {e}");
    }
    assert!(ok, "[{name}] the queue did not drain: {s:?}");
    let clean = workers.stop().await;
    let deliveries = all_deliveries(&*b.store, &b.tenant).await;
    let d = check_at_least_once(n, &deliveries, &receiver.requests(), &marker);
    let rss_mib: Vec<String> = rss
        .iter()
        .map(|k| format!("{:.1}", *k as f64 / 1024.0))
        .collect();
    eprintln!(
        "[{name}] {n} deliveries from {WRITERS} writers: enqueued in {:.1} s ({:.0} messages/s \
         while draining), drained in {:.1} s ({:.0} deliveries/s end to end); peak RSS of the \
         3 relays {} MiB; {} duplicates; {clean}/3 stopped cleanly",
        enqueued_in.as_secs_f64(),
        n as f64 / enqueued_in.as_secs_f64(),
        drained_in.as_secs_f64(),
        n as f64 / drained_in.as_secs_f64(),
        rss_mib.join(" / "),
        d.duplicates,
    );
}

#[test]
fn postgres() {
    let _turn = crate::heavy_turn();
    crate::run(
        "load/postgres",
        Duration::from_secs(420),
        scenario(Kind::Postgres),
    );
}

#[test]
fn sqlite() {
    let _turn = crate::heavy_turn();
    crate::run(
        "load/sqlite",
        Duration::from_secs(420),
        scenario(Kind::Sqlite),
    );
}

#[test]
fn redis() {
    let _turn = crate::heavy_turn();
    crate::run(
        "load/redis",
        Duration::from_secs(420),
        scenario(Kind::Redis),
    );
}
