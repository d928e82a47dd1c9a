//! **Rate limits across relays** (issue 39). One loopback receiver behind an endpoint limited
//! to 5 a second, 30 deliveries, and two `outbox relay` processes on the same store: every
//! delivery arrives (at least once, every copy under its delivery's `webhook-id`), and the
//! receiver never sees more than 5 arrivals within one second, less [`ALLOWANCE`].
//!
//! Each relay alone would send 5 a second (its own token bucket), so without the store's
//! permits the two together send 10 in the first second; with them the starts of both
//! relays share one sliding window in the store.

use std::time::Duration;

use outboxkit_core::Timestamp;
use outboxkit_dispatch::NewEndpoint;
use outboxkit_testing::WebhookReceiver;

use crate::audit::{all_deliveries, check_at_least_once, enqueue_numbered, wait_drained};
use crate::backend::{Backend, Kind};
use crate::relay::{fast_flags, Workers};

const N: u64 = 30;
const RATE: u32 = 5;

/// How much shorter than one second the window the receiver checks is. The store bounds
/// the *starts* (each permit comes back one second after the `now` it was granted at); the
/// receiver sees *arrivals*, each later than its start by the permit call's answer (a
/// relay uses a grant only within 100 ms of asking: `permits::FRESH`) plus the loopback
/// transit and scheduling. So two starts a second apart can arrive closer together by at
/// most the difference of those delays, and the check is a bound on what the store
/// guarantees, not a measurement of speed: a slow machine only spreads arrivals further
/// apart (fewer in any window), it cannot make a correct limiter fail, and a broken one
/// (two relays each sending 5) puts 10 within milliseconds, far inside any window.
const ALLOWANCE: Duration = Duration::from_millis(250);

/// The most arrivals in any half-open window of `window` (times sorted).
fn most_in_any_window(times: &[Timestamp], window: Duration) -> (usize, Option<Timestamp>) {
    let mut best = (0, None);
    for (i, start) in times.iter().enumerate() {
        let end = start.saturating_add(window);
        let n = times[i..].iter().take_while(|t| **t < end).count();
        if n > best.0 {
            best = (n, Some(*start));
        }
    }
    best
}

async fn scenario(kind: Kind) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("rate/{}", kind.name());
    let receiver = WebhookReceiver::start().await.expect("start the receiver");
    let (_, secret) = b
        .admin()
        .create(
            &b.tenant,
            NewEndpoint {
                url: receiver.url(),
                filter: "*".into(),
                rate_limit: Some(RATE),
                ..NewEndpoint::default()
            },
        )
        .await
        .expect("create the rate-limited endpoint");
    receiver.set_secrets(vec![secret]);
    let marker = crate::marker("rate");
    enqueue_numbered(&*b.store, "rel.rate", 0..N, N as usize, &marker).await;

    let mut workers = Workers::start(&b, 2, fast_flags());
    let (s, ok) = wait_drained(&*b.store, N, Duration::from_secs(90)).await;
    if let Err(e) = workers.check_alive() {
        panic!("[{name}] {e}");
    }
    assert!(
        ok,
        "[{name}] the queue did not drain: {s:?}\n{}",
        workers.tails(20)
    );
    workers.stop().await;

    let deliveries = all_deliveries(&*b.store, &b.tenant).await;
    let requests = receiver.requests();
    let d = check_at_least_once(N, &deliveries, &requests, &marker);
    let mut times: Vec<Timestamp> = requests.iter().map(|r| r.at).collect();
    times.sort_unstable();
    let window = Duration::from_secs(1) - ALLOWANCE;
    let (most, at) = most_in_any_window(&times, window);
    let span = times
        .last()
        .map_or(Duration::ZERO, |l| l.duration_since(times[0]));
    eprintln!(
        "[{name}] {N} deliveries at {RATE}/s through 2 relays: {} requests ({} duplicates) \
         over {:.2} s; at most {most} in any {window:?}",
        d.requests,
        d.duplicates,
        span.as_secs_f64(),
    );
    assert!(
        most <= RATE as usize,
        "[{name}] {most} arrivals within {window:?} from {at:?} (limit {RATE} a second)"
    );
}

#[test]
fn sqlite() {
    let _turn = crate::heavy_turn();
    crate::run(
        "rate/sqlite",
        Duration::from_secs(180),
        scenario(Kind::Sqlite),
    );
}

#[test]
fn postgres() {
    let _turn = crate::heavy_turn();
    crate::run(
        "rate/postgres",
        Duration::from_secs(180),
        scenario(Kind::Postgres),
    );
}

#[test]
fn redis() {
    let _turn = crate::heavy_turn();
    crate::run(
        "rate/redis",
        Duration::from_secs(180),
        scenario(Kind::Redis),
    );
}
