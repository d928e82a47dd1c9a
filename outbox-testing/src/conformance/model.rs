//! The model-based test: random sequences of enqueue / claim / complete / release / advance /
//! replay, compared after every step with a small reference model of each delivery's status,
//! attempts, snoozes and due time. [`check_model`] runs it against any store;
//! `conformance_tests!` runs it for every store with [`model_cases`] cases.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, ClaimToken, Clock, Completion, ConsumerName, DeadReason, DeliveryFilter,
    DeliveryId, DeliveryStatus as S, DeliveryStore, DeliveryStoreExt, EndpointStore, ErrorKind,
    Lease, Ledger, MessageStore, NewMessage, PageRequest, TenantId, Timestamp, Verdict,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::Fixture;
use crate::clock::ManualClock;

const LEASE: Duration = Duration::from_secs(30);
const BUDGET: u32 = 3;
const CONSUMERS: [&str; 2] = ["first", "second"];

/// One step of a model run.
#[derive(Clone, Debug)]
pub enum Op {
    /// Enqueue one message (two deliveries, one per consumer).
    Enqueue {
        /// Its ordering key, if any.
        key: Option<u8>,
        /// Its delay in seconds.
        delay: u64,
    },
    /// Claim for one consumer.
    Claim {
        /// Which consumer.
        consumer: usize,
        /// The batch size.
        batch: u32,
    },
    /// Complete one of the leases handed out so far (maybe a stale one).
    Complete {
        /// Which lease.
        pick: usize,
        /// Which verdict.
        kind: u8,
        /// Its due time, in seconds from now.
        secs: u64,
    },
    /// Release one of the leases handed out so far.
    Release {
        /// Which lease.
        pick: usize,
        /// The delay.
        secs: u64,
    },
    /// Move the clock.
    Advance {
        /// By this many seconds.
        secs: u64,
    },
    /// Replay one delivery.
    Replay {
        /// Which delivery.
        pick: usize,
    },
}

/// A random step.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (proptest::option::of(0u8..2), 0u64..90).prop_map(|(key, delay)| Op::Enqueue { key, delay }),
        4 => (0usize..2, 1u32..5).prop_map(|(consumer, batch)| Op::Claim { consumer, batch }),
        4 => (any::<usize>(), 0u8..6, 0u64..120).prop_map(|(pick, kind, secs)| Op::Complete { pick, kind, secs }),
        1 => (any::<usize>(), 0u64..60).prop_map(|(pick, secs)| Op::Release { pick, secs }),
        3 => (1u64..90).prop_map(|secs| Op::Advance { secs }),
        1 => any::<usize>().prop_map(|pick| Op::Replay { pick }),
    ]
}

// ---- the reference model: one screen ------------------------------------------------
#[derive(Clone, Debug, PartialEq)]
struct M {
    status: S,
    attempts: u32,
    snoozes: u32,
    due: Timestamp,
    consumer: usize,
    key: Option<u8>,
    token: Option<ClaimToken>,
    from: S,
}

fn refund(m: &M) -> u32 {
    if m.from == S::Held {
        m.attempts
    } else {
        m.attempts - 1
    }
}

fn claimable(s: S) -> bool {
    matches!(s, S::Pending | S::Held | S::Processing | S::Sending)
}

/// What a claim takes, in order; exhausted candidates die first.
fn model_claim(model: &mut [M], consumer: usize, batch: u32, now: Timestamp) -> Vec<usize> {
    let mut cand: Vec<usize> = (0..model.len())
        .filter(|&i| {
            model[i].consumer == consumer && claimable(model[i].status) && model[i].due <= now
        })
        .collect();
    cand.sort_by_key(|&i| (model[i].due, i));
    for &i in &cand {
        if model[i].status != S::Held && model[i].attempts >= BUDGET {
            model[i].status = S::Dead;
        }
    }
    let mut taken = Vec::new();
    for i in cand.into_iter().filter(|&i| model[i].status != S::Dead) {
        let blocked = model[i].key.is_some()
            && (0..i).any(|j| {
                model[j].consumer == consumer
                    && model[j].key == model[i].key
                    && !matches!(model[j].status, S::Succeeded | S::Dead)
            });
        if taken.len() < batch as usize && !blocked {
            taken.push(i);
        }
    }
    for &i in &taken {
        let m = &mut model[i];
        m.from = m.status;
        m.attempts += u32::from(m.status != S::Held);
        m.status = S::Processing;
        m.due = now.saturating_add(LEASE);
    }
    taken
}

/// The row after a verdict (the verdict table of DESIGN §4, `outboxkit_core::classify`), or `None` when the
/// token is stale.
fn model_complete(m: &mut M, token: ClaimToken, v: &Verdict, now: Timestamp) -> Option<()> {
    (m.token == Some(token) && matches!(m.status, S::Processing | S::Sending)).then_some(())?;
    m.token = None;
    (m.status, m.due) = match v {
        Verdict::Succeeded => (S::Succeeded, now),
        Verdict::Retry { at } => (S::Pending, *at),
        Verdict::Held { probe_at } => (S::Held, *probe_at),
        Verdict::Dead { .. } => (S::Dead, now),
        Verdict::Snoozed { until } => {
            (m.attempts, m.snoozes) = (refund(m), m.snoozes + 1);
            (S::Pending, *until)
        }
        Verdict::Parked { until } => {
            m.attempts = refund(m);
            (S::Pending, *until)
        }
        other => panic!("unexpected verdict {other:?}"),
    };
    Some(())
}
// ---------------------------------------------------------------------------------------

fn verdict(kind: u8, at: Timestamp, now: Timestamp) -> Verdict {
    match kind {
        0 => Verdict::Succeeded,
        1 => Verdict::Retry { at },
        2 => Verdict::Held { probe_at: at },
        3 => Verdict::Dead {
            reason: DeadReason::Permanent,
        },
        4 => Verdict::Snoozed { until: at },
        _ => Verdict::Parked { until: at.max(now) },
    }
}

/// Run `ops` against the fixture's store, comparing every delivery with the model after
/// each step. The store must be fresh (the final count covers every delivery in it).
pub async fn follows_the_model(fx: &Fixture, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let clock = fx.clock().clone();
    let store = fx.store().clone();
    let names: Vec<ConsumerName> = CONSUMERS
        .iter()
        .map(|n| ConsumerName::new(*n).expect("name"))
        .collect();
    for n in &names {
        let c = outboxkit_core::Consumer {
            name: n.clone(),
            filter: outboxkit_core::TopicFilter::all(),
            created_at: clock.now(),
            status: outboxkit_core::ConsumerStatus::Active,
        };
        store.put_consumer(&c).await.expect("put_consumer");
    }
    let tenant = TenantId::default();
    let (mut model, mut ids): (Vec<M>, Vec<DeliveryId>) = (Vec::new(), Vec::new());
    let mut leases: Vec<(usize, Lease)> = Vec::new();
    for op in ops {
        let now = clock.now();
        match op {
            Op::Enqueue { key, delay } => {
                let mut m = NewMessage::raw("model.event", b"{}".to_vec())
                    .delay(Duration::from_secs(delay));
                if let Some(k) = key {
                    m = m.ordering_key(format!("key-{k}"));
                }
                let e = store.enqueue(m).await.expect("enqueue");
                prop_assert_eq!(e.deliveries, 2);
                let page = store
                    .list_deliveries(
                        &tenant,
                        &DeliveryFilter::default(),
                        PageRequest::first(1000),
                    )
                    .await
                    .expect("list");
                for (consumer, name) in names.iter().enumerate() {
                    let d = page
                        .items
                        .iter()
                        .find(|d| {
                            d.message_id == e.message_id
                                && d.destination
                                    == outboxkit_core::Destination::Handler(name.clone())
                        })
                        .expect("the new delivery");
                    ids.push(d.id);
                    let due = now.saturating_add(Duration::from_secs(delay));
                    model.push(M {
                        status: S::Pending,
                        attempts: 0,
                        snoozes: 0,
                        due,
                        consumer,
                        key,
                        token: None,
                        from: S::Pending,
                    });
                }
            }
            Op::Claim { consumer, batch } => {
                let req = ClaimRequest::new(batch, LEASE).handler(names[consumer].clone(), BUDGET);
                let got = store.claim(&req).await.expect("claim");
                let want = model_claim(&mut model, consumer, batch, now);
                prop_assert_eq!(
                    got.iter().map(|c| c.delivery.id).collect::<Vec<_>>(),
                    want.iter().map(|&i| ids[i]).collect::<Vec<_>>()
                );
                for (c, &i) in got.into_iter().zip(&want) {
                    model[i].token = Some(c.lease.token);
                    prop_assert_eq!(c.lease.claimed_from, model[i].from);
                    leases.push((i, c.lease));
                }
            }
            Op::Complete { pick, kind, secs } if !leases.is_empty() => {
                let (i, lease) = leases[pick % leases.len()].clone();
                let v = verdict(kind, now.saturating_add(Duration::from_secs(secs)), now);
                let r = store
                    .complete(
                        &lease,
                        &Completion {
                            verdict: v.clone(),
                            attempt: None,
                        },
                    )
                    .await;
                match model_complete(&mut model[i], lease.token, &v, now) {
                    Some(()) => prop_assert!(r.is_ok(), "{:?}", r),
                    None => prop_assert_eq!(r.map_err(|e| e.kind()), Err(ErrorKind::LeaseLost)),
                }
            }
            Op::Release { pick, secs } if !leases.is_empty() => {
                let (i, lease) = leases[pick % leases.len()].clone();
                let r = store
                    .release(std::slice::from_ref(&lease), Duration::from_secs(secs))
                    .await
                    .expect("release");
                let m = &mut model[i];
                if m.token == Some(lease.token) && matches!(m.status, S::Processing | S::Sending) {
                    (m.status, m.attempts, m.token) = (
                        if m.from == S::Held {
                            S::Held
                        } else {
                            S::Pending
                        },
                        refund(m),
                        None,
                    );
                    m.due = now.saturating_add(Duration::from_secs(secs));
                    prop_assert_eq!((r.released, r.lost), (1, 0));
                } else {
                    prop_assert_eq!((r.released, r.lost), (0, 1));
                }
            }
            Op::Advance { secs } => clock.advance(Duration::from_secs(secs)),
            Op::Replay { pick } if !model.is_empty() => {
                let i = pick % model.len();
                let r = store.replay(&tenant, ids[i]).await;
                if model[i].status == S::Dead {
                    prop_assert!(r.is_ok(), "{:?}", r);
                    let m = &mut model[i];
                    (m.status, m.attempts, m.snoozes, m.due, m.token) =
                        (S::Pending, 0, 0, now, None);
                } else {
                    prop_assert_eq!(r.map_err(|e| e.kind()), Err(ErrorKind::Conflict));
                }
            }
            _ => {}
        }
        for (i, m) in model.iter().enumerate() {
            let d = store
                .get_delivery(&tenant, ids[i])
                .await
                .expect("get_delivery");
            prop_assert_eq!(
                (d.status, d.attempts, d.snoozes, d.next_attempt_at),
                (m.status, m.attempts, m.snoozes, m.due),
                "delivery {} after {:?}",
                i,
                op
            );
        }
    }
    let stats = store.stats().await.expect("stats");
    prop_assert_eq!(stats.total() as usize, model.len());
    Ok(())
}

/// How many random runs `conformance_tests!` gives each store: `OUTBOX_MODEL_CASES`, else 16
/// (each run is a fresh store and up to 60 steps; the in-memory store's own test runs 256).
pub fn model_cases() -> u32 {
    std::env::var("OUTBOX_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

/// Run `cases` random model runs, each against a fresh store from `setup`; panics with the
/// shrunk failing sequence.
pub fn check_model<S, SF>(setup: S, cases: u32)
where
    S: Fn(Arc<ManualClock>) -> SF,
    SF: Future<Output = Option<Fixture>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the model test");
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..=60), |ops| {
        rt.block_on(async {
            let Some(fx) = setup(ManualClock::new()).await else {
                return Ok(());
            };
            let r = follows_the_model(&fx, ops).await;
            fx.cleanup().await;
            r
        })
    });
    if let Err(e) = result {
        panic!("the store departs from the model: {e}");
    }
}
