//! Part 3, **Receiver faults.** The receiver answers a seeded random mix of 2xx, 5xx, 404, 429
//! with `Retry-After: 1`, 401, a stall after the headers, a reply slower than the deadline
//! and a connection reset, with a retry schedule of 100/200/300 ms (four attempts). 401s
//! hold deliveries; once everything else has settled, the endpoint's secret is rotated with
//! `EndpointAdmin::rotate_secret` (which releases them) and the receiver given the new one,
//! until nothing is held.
//!
//! The dispatcher runs **in-process** on each store (the real `HttpTransport`), so the
//! answers come from one script in arrival order: request `i` got answer `i`. That makes the
//! check exact: replaying each delivery's answers through `outboxkit_core::classify`
//! must give its final status, dead reason and attempt count, and its ledger
//! (`store.attempts`) must hold one attempt per request the receiver saw for its
//! `webhook-id`, each with the status or error class of that answer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    classify, AttemptContext, AttemptOutcome, DeadReason, DeliveryStatus, EntropyExt, ErrorClass,
    Outcome, RetryPolicy, TenantPolicy, Timestamp, Verdict, VerdictPolicy,
};
use outboxkit_dispatch::{Dispatcher, DispatcherConfig};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::{Reply, SeededEntropy, WebhookReceiver};

use crate::audit::{all_deliveries, enqueue_numbered, stats};
use crate::backend::{Backend, Kind};

const N: u64 = 200;
const TIMEOUT: Duration = Duration::from_secs(1);

fn pick(rng: &SeededEntropy) -> Reply {
    match rng.next_u64() % 100 {
        0..=29 => Reply::Status(200),
        30..=34 => Reply::Status(204),
        35..=44 => Reply::Status(503),
        45..=49 => Reply::Status(500),
        50..=52 => Reply::Status(404),
        53..=61 => Reply::RetryAfter(429, "1".into()),
        62..=71 => Reply::Status(401),
        72..=77 => Reply::StallAfterHeaders(200),
        78..=80 => Reply::Delay(Duration::from_millis(1_600), 200),
        81..=89 => Reply::Reset,
        _ => Reply::Status(202),
    }
}

/// What the dispatcher must have made of an answer.
fn outcome_of(reply: &Reply) -> Outcome {
    match reply {
        Reply::Status(s) => Outcome::Http {
            status: *s,
            retry_after: None,
        },
        Reply::RetryAfter(s, v) => Outcome::Http {
            status: *s,
            retry_after: Some(v.clone()),
        },
        Reply::StallAfterHeaders(_) | Reply::Delay(..) => Outcome::Transport(ErrorClass::Timeout),
        Reply::Reset => Outcome::Transport(ErrorClass::Network),
        other => panic!("the script holds no {other:?}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Pending,
    Held { at: usize },
    Succeeded,
    Dead(DeadReason),
}

/// Replay one delivery's answers (request index, answer) through `classify`; `marks` are
/// the receiver counts just before each secret rotation. Returns the expected final status,
/// dead reason and attempt count.
fn expected(
    answers: &[(usize, Reply)],
    marks: &[usize],
    policy: &VerdictPolicy,
) -> Result<(DeliveryStatus, Option<DeadReason>, u32), String> {
    let max = policy.retry.max_attempts();
    let rotated_between = |from: usize, to: usize| marks.iter().any(|m| *m > from && *m <= to);
    let mut state = State::Pending;
    let mut attempts = 0u32;
    for (idx, reply) in answers {
        match state {
            State::Pending => {}
            State::Held { at } => {
                if !rotated_between(at, *idx) {
                    return Err(format!("request {idx} while held since {at}, no rotation"));
                }
                if attempts >= max {
                    return Err(format!("request {idx}: released past its budget"));
                }
            }
            State::Succeeded | State::Dead(_) => {
                return Err(format!(
                    "request {idx} after the delivery finished ({state:?})"
                ))
            }
        }
        attempts += 1;
        let ctx = AttemptContext {
            attempt: attempts,
            snoozes: 0,
            probe: false,
            now: Timestamp::EPOCH.saturating_add(Duration::from_secs(1_700_000_000)),
            jitter: 0.0,
        };
        state = match classify(&outcome_of(reply), &ctx, policy) {
            Verdict::Succeeded => State::Succeeded,
            Verdict::Retry { .. } => State::Pending,
            Verdict::Held { .. } => State::Held { at: *idx },
            Verdict::Dead { reason } => State::Dead(reason),
            other => return Err(format!("unexpected verdict {other:?}")),
        };
    }
    match state {
        State::Succeeded => Ok((DeliveryStatus::Succeeded, None, attempts)),
        State::Dead(r) => Ok((DeliveryStatus::Dead, Some(r), attempts)),
        // Released by a rotation with its budget spent: dead at the next claim, unsent.
        State::Held { at } if marks.iter().any(|m| *m > at) && attempts >= max => Ok((
            DeliveryStatus::Dead,
            Some(DeadReason::MaxAttempts),
            attempts,
        )),
        State::Held { .. } => Ok((DeliveryStatus::Held, None, attempts)),
        State::Pending => Err(format!("{attempts} attempts, then no retry was sent")),
    }
}

type Running = tokio::task::JoinHandle<outboxkit_core::Result<outboxkit_dispatch::Report>>;

/// Wait until nothing is pending or in flight (only succeeded, dead and held remain);
/// fails at once when the dispatcher stopped on its own.
async fn settle(store: &dyn outboxkit_core::Store, running: &mut Running) -> outboxkit_core::Stats {
    for _ in 0..1_200 {
        if running.is_finished() {
            let r = running.await;
            panic!("the dispatcher stopped on its own: {r:?}");
        }
        let s = stats(store).await;
        if s.pending == 0 && s.processing == 0 && s.sending == 0 {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the deliveries did not settle within 60 s: {:?}",
        stats(store).await
    )
}

async fn scenario(kind: Kind) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("faults/{}", kind.name());
    let rng = SeededEntropy::new(crate::seed(&name));
    let receiver = WebhookReceiver::start().await.expect("start the receiver");
    let (endpoint, secret) = b.endpoint(&receiver.url()).await;
    receiver.set_secrets(vec![secret]);
    let script: Vec<Reply> = (0..N * 6).map(|_| pick(&rng)).collect();
    receiver.script(script.clone());

    let retry = RetryPolicy::schedule(vec![
        Duration::from_millis(100),
        Duration::from_millis(200),
        Duration::from_millis(300),
    ])
    .expect("a valid schedule");
    let policy = VerdictPolicy::new(retry.clone());
    let config = DispatcherConfig {
        batch_size: 50,
        concurrency: 32,
        poll_interval: Duration::from_millis(50),
        webhook_timeout: TIMEOUT,
        lease: Duration::from_secs(5),
        shutdown_grace: Duration::from_secs(2),
        // The scripted answers are mostly failures, so the endpoint's circuit opens; short
        // cool-downs keep the breaker in play without outlasting the settle wait (the
        // breaker's own cycle is tested in outbox-testing's dispatcher isolation tests).
        breaker_cooldown: Duration::from_millis(50),
        breaker_max_cooldown: Duration::from_millis(200),
        ..DispatcherConfig::default()
    };
    assert_eq!(config.held_probe_interval, policy.held_probe_interval);
    let egress = EgressPolicy::default().allow_http(true).allow_private(true);
    let dispatcher = Dispatcher::builder(b.store.clone())
        .config(config)
        .clock(b.clock.clone())
        .entropy(b.entropy.clone())
        .webhooks(
            Arc::new(HttpTransport::new(egress).expect("a transport")),
            b.vault.clone(),
        )
        .webhook_policy(TenantPolicy::uniform(retry))
        .build()
        .expect("a valid dispatcher");
    enqueue_numbered(&*b.store, "rel.faults", 0..N, 100, "faults").await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut running: Running = tokio::spawn(async move {
        dispatcher
            .run(async move {
                let _ = stopped.await;
            })
            .await
    });

    let admin = b.admin();
    let mut marks = Vec::new();
    for _ in 0..8 {
        let s = settle(&*b.store, &mut running).await;
        if s.held == 0 {
            break;
        }
        marks.push(receiver.count());
        let fresh = admin
            .rotate_secret(&b.tenant, endpoint, None)
            .await
            .expect("rotate the secret");
        receiver.set_secrets(vec![fresh]);
    }
    let s = settle(&*b.store, &mut running).await;
    let _ = stop.send(());
    let report = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the dispatcher stops")
        .expect("the dispatcher task")
        .expect("the dispatcher run");
    assert_eq!(
        s.held,
        0,
        "[{name}] still held after {} rotations",
        marks.len()
    );
    assert_eq!(s.succeeded + s.dead, N, "[{name}] {s:?}");

    let requests = receiver.requests();
    let mut by_id: BTreeMap<String, Vec<(usize, Reply)>> = BTreeMap::new();
    for (i, r) in requests.iter().enumerate() {
        assert!(r.verified(), "[{name}] request {i} failed verification");
        let answer = script.get(i).cloned().unwrap_or(Reply::Status(200));
        let id = r.webhook_id.clone().expect("a webhook-id");
        by_id.entry(id).or_default().push((i, answer));
    }
    let deliveries = all_deliveries(&*b.store, &b.tenant).await;
    assert_eq!(deliveries.len() as u64, N);
    let mut finals: BTreeMap<String, usize> = BTreeMap::new();
    let mut probes = 0;
    for d in &deliveries {
        let answers = by_id.remove(&d.id.to_string()).unwrap_or_default();
        let (status, reason, attempts) = expected(&answers, &marks, &policy)
            .unwrap_or_else(|e| panic!("[{name}] delivery {}: {e}; answers {answers:?}", d.id));
        let seen = (d.status, d.dead_reason, d.attempts);
        assert_eq!(
            seen,
            (status, reason, attempts),
            "[{name}] delivery {} after {answers:?}",
            d.id
        );
        let ledger = b
            .store
            .attempts(&b.tenant, d.id)
            .await
            .expect("read the ledger");
        probes += ledger.iter().filter(|a| a.probe).count();
        let tries: Vec<_> = ledger.iter().filter(|a| !a.probe).collect();
        assert_eq!(
            tries.len(),
            answers.len(),
            "[{name}] delivery {}: the ledger has {} attempts, the receiver saw {} requests",
            d.id,
            tries.len(),
            answers.len()
        );
        for (n, (a, (_, reply))) in tries.iter().zip(&answers).enumerate() {
            assert_eq!(a.number as usize, n + 1, "[{name}] attempt numbers");
            let want = match outcome_of(reply) {
                Outcome::Http { status, .. } => (
                    Some(status),
                    if (200..300).contains(&status) {
                        AttemptOutcome::Succeeded
                    } else if status >= 500 {
                        AttemptOutcome::Failed(ErrorClass::Response5xx)
                    } else {
                        AttemptOutcome::Failed(ErrorClass::Response4xx)
                    },
                ),
                Outcome::Transport(class) => (None, AttemptOutcome::Failed(class)),
                _ => unreachable!(),
            };
            assert_eq!(
                (a.record.status_code, a.record.outcome),
                want,
                "[{name}] delivery {} attempt {} for {reply:?}",
                d.id,
                n + 1
            );
        }
        let key = match d.dead_reason {
            Some(r) => format!("dead ({})", r.as_str()),
            None => d.status.as_str().to_owned(),
        };
        *finals.entry(key).or_default() += 1;
    }
    assert!(
        by_id.is_empty(),
        "[{name}] requests for unknown webhook-ids: {:?}",
        by_id.keys().take(3).collect::<Vec<_>>()
    );
    eprintln!(
        "[{name}] {N} deliveries, {} requests, {} secret rotations, {probes} probes; \
         final: {finals:?}; dispatcher report: {} claimed, {} lease lost",
        requests.len(),
        marks.len(),
        report.claimed,
        report.lease_lost
    );
}

#[test]
fn postgres() {
    crate::run(
        "faults/postgres",
        Duration::from_secs(180),
        scenario(Kind::Postgres),
    );
}

#[test]
fn sqlite() {
    crate::run(
        "faults/sqlite",
        Duration::from_secs(180),
        scenario(Kind::Sqlite),
    );
}

#[test]
fn redis() {
    crate::run(
        "faults/redis",
        Duration::from_secs(180),
        scenario(Kind::Redis),
    );
}
