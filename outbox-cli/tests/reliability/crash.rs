//! Part 1, **Crash.** 5,000 deliveries to a loopback receiver, three `outbox relay` workers, and
//! every 200–600 ms (seeded) a random worker is killed with `SIGKILL` and restarted, until
//! the queue drains. Then every delivery reached the receiver at least once, every copy of
//! a message carries the same `webhook-id`, nothing is pending, processing, held or dead, and
//! the duplicate count is reported.
//!
//! The relays run with `--lease 3s` (the default would be the 1 s webhook timeout + 30 s),
//! so a killed worker's claims come back within seconds. Every stranded claim spends an
//! attempt (the store cannot tell a crash from a failure), so the schedule has ten 1 s steps:
//! a budget of eleven claims that kills cannot exhaust in practice; the highest attempt
//! count is reported.

use std::time::Duration;

use outboxkit_core::{EntropyExt, Stopwatch};
use outboxkit_testing::{SeededEntropy, WebhookReceiver};

use crate::audit::{
    all_deliveries, check_at_least_once, drained, enqueue_numbered, stats, wait_drained,
};
use crate::backend::{Backend, Kind};
use crate::relay::{fast_flags, Workers};

/// Deliveries per store (the N).
const N: u64 = 5_000;
/// Kills stop after this long even if the queue has not drained (then the survivors drain).
const KILL_PHASE: Duration = Duration::from_secs(120);

fn flags() -> Vec<String> {
    let mut f = fast_flags();
    f.push("--retry-schedule".into());
    f.push(["1s"; 10].join(","));
    f
}

async fn scenario(kind: Kind) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("crash/{}", kind.name());
    let rng = SeededEntropy::new(crate::seed(&name));
    let receiver = WebhookReceiver::start().await.expect("start the receiver");
    let (_, secret) = b.endpoint(&receiver.url()).await;
    receiver.set_secrets(vec![secret]);
    let marker = crate::marker("crash");
    enqueue_numbered(&*b.store, "rel.crash", 0..N, 250, &marker).await;

    let clock = Stopwatch::start();
    let mut workers = Workers::start(&b, 3, flags());
    let mut kills = 0u32;
    let mut drained_during_kills = false;
    for _ in 0..1_000 {
        let pause = 200 + rng.next_u64() % 400;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if let Err(e) = workers.check_alive() {
            panic!("[{name}] {e}");
        }
        if drained(&stats(&*b.store).await, N) {
            drained_during_kills = true;
            break;
        }
        if clock.elapsed() > KILL_PHASE {
            break;
        }
        let victim = (rng.next_u64() % 3) as usize;
        workers.kill_and_restart(&b, victim);
        kills += 1;
    }
    let (s, ok) = wait_drained(&*b.store, N, Duration::from_secs(60)).await;
    let took = clock.elapsed();
    if let Err(e) = workers.check_alive() {
        panic!("[{name}] {e}");
    }
    assert!(
        ok,
        "[{name}] the queue did not drain after {kills} kills: {s:?}"
    );
    let clean = workers.stop().await;

    let deliveries = all_deliveries(&*b.store, &b.tenant).await;
    let requests = receiver.requests();
    let d = check_at_least_once(N, &deliveries, &requests, &marker);
    assert_eq!(s.dead, 0, "[{name}] dead deliveries: {s:?}");
    assert!(kills > 0, "[{name}] no worker was killed");
    eprintln!(
        "[{name}] {N} deliveries, 3 workers, {kills} kills ({} relays started; drained {} the \
         kills): {:.1} s, {:.0} deliveries/s under kills; {} requests, {} duplicates \
         (at most {} copies and {} attempts for one delivery); {clean}/3 stopped cleanly",
        workers.started(),
        if drained_during_kills {
            "during"
        } else {
            "after"
        },
        took.as_secs_f64(),
        N as f64 / took.as_secs_f64(),
        d.requests,
        d.duplicates,
        d.max_copies,
        d.max_attempts,
    );
}

#[test]
fn postgres() {
    let _turn = crate::heavy_turn();
    crate::run(
        "crash/postgres",
        Duration::from_secs(300),
        scenario(Kind::Postgres),
    );
}

#[test]
fn sqlite() {
    let _turn = crate::heavy_turn();
    crate::run(
        "crash/sqlite",
        Duration::from_secs(300),
        scenario(Kind::Sqlite),
    );
}

#[test]
fn redis() {
    let _turn = crate::heavy_turn();
    crate::run(
        "crash/redis",
        Duration::from_secs(300),
        scenario(Kind::Redis),
    );
}
