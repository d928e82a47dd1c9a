//! Activity for the console's charts ([`outboxkit_core::ConsoleStore::activity`]): known
//! attempts at known times, every bucket checked.

use std::time::Duration;

use outboxkit_core::{
    classify, ActivityBucket, ActivityQuery, AttemptContext, Completion, EndpointId, ErrorKind,
    Outcome, Timestamp,
};

use super::helpers::*;
use super::Fixture;

/// Claim the one due webhook delivery, spend `millis` on it, and complete it with
/// `outcome` under a policy of two attempts (the second failure is dead).
async fn attempt(fx: &Fixture, outcome: Outcome, millis: u64) {
    let got = claim_one(fx, &for_webhooks()).await;
    let started = now(fx);
    fx.clock().advance(Duration::from_millis(millis));
    let finished = now(fx);
    let ctx = AttemptContext {
        attempt: got.lease.attempts,
        snoozes: 0,
        probe: false,
        now: finished,
        jitter: 0.5,
    };
    let verdict = classify(&outcome, &ctx, &handler_policy(2));
    let attempt = record(&outcome, started, finished, None);
    fx.store()
        .complete(&got.lease, &Completion { verdict, attempt })
        .await
        .expect("complete");
}

/// Advance the clock to `t0 + ms`.
fn at(fx: &Fixture, t0: Timestamp, ms: i64) {
    let target = t0.as_unix_millis() + ms;
    let d = target - now(fx).as_unix_millis();
    assert!(d >= 0, "the scenario goes forward only");
    fx.clock().advance(Duration::from_millis(d as u64));
}

struct Scenario {
    t0: Timestamp,
    first: EndpointId,
    second: EndpointId,
}

/// acme: endpoint `first` (topics `a.*`) and `second` (`b.*`); other: one endpoint. Times
/// are from `t0`, in seconds: 10 ok (250 ms) · 20 fail · 90 dead · 100 ok on `second`
/// (750 ms) · 130 other tenant ok · 180 ok (40 ms), ok (60 ms) · 300 ok.
async fn scenario(fx: &Fixture) -> Scenario {
    let t0 = now(fx);
    let first = add_endpoint(fx, "acme", "a.*").await.id;
    let second = add_endpoint(fx, "acme", "b.*").await.id;
    add_endpoint(fx, "other", "*").await;
    let ok = http(200);
    at(fx, t0, 10_000);
    enqueue(fx, msg("a.x").tenant("acme")).await;
    attempt(fx, ok.clone(), 250).await;
    at(fx, t0, 20_000);
    enqueue(fx, msg("a.y").tenant("acme")).await;
    attempt(fx, http(503), 1_000).await;
    at(fx, t0, 90_000);
    attempt(fx, http(503), 500).await;
    at(fx, t0, 100_000);
    enqueue(fx, msg("b.z").tenant("acme")).await;
    attempt(fx, ok.clone(), 750).await;
    at(fx, t0, 130_000);
    enqueue(fx, msg("a.w").tenant("other")).await;
    attempt(fx, ok.clone(), 100).await;
    at(fx, t0, 180_000);
    enqueue(fx, msg("a.v").tenant("acme")).await;
    attempt(fx, ok.clone(), 40).await;
    enqueue(fx, msg("a.u").tenant("acme")).await;
    attempt(fx, ok.clone(), 60).await;
    at(fx, t0, 300_000);
    enqueue(fx, msg("a.t").tenant("acme")).await;
    attempt(fx, ok, 0).await;
    Scenario { t0, first, second }
}

fn query(s: &Scenario, t: &str, from: i64, to: i64, bucket: u64) -> ActivityQuery {
    let ts = |ms: i64| Timestamp::from_unix_millis(s.t0.as_unix_millis() + ms).expect("a time");
    ActivityQuery {
        tenant: tenant(t),
        endpoint: None,
        since: ts(from),
        until: ts(to),
        bucket: Duration::from_secs(bucket),
    }
}

/// `(succeeded, failed, dead, latency total, latency max)` per bucket.
type Row = (u64, u64, u64, u64, u64);

fn check(got: &[ActivityBucket], q: &ActivityQuery, want: &[Row]) {
    let start = |i: usize| {
        Timestamp::from_unix_millis(q.since.as_unix_millis() + i as i64 * q.bucket_millis())
            .expect("a time")
    };
    let rows: Vec<(Timestamp, Row)> = got
        .iter()
        .map(|b| {
            let r = (
                b.succeeded,
                b.failed,
                b.dead,
                b.latency_total_ms,
                b.latency_max_ms,
            );
            (b.start, r)
        })
        .collect();
    let want: Vec<(Timestamp, Row)> = want
        .iter()
        .enumerate()
        .map(|(i, r)| (start(i), *r))
        .collect();
    assert_eq!(rows, want);
}

async fn run(fx: &Fixture, q: &ActivityQuery) -> Vec<ActivityBucket> {
    fx.console().activity(q).await.expect("activity")
}

/// Every attempt counts once, in the bucket of its finish time: a success with its
/// latency, a failure followed by a retry as failed, the last failure of a dead delivery
/// as dead; the range's end is exclusive and a range starting later drops what came before.
pub async fn activity_counts_every_bucket(fx: Fixture) {
    let s = scenario(&fx).await;
    let q = query(&s, "acme", 0, 300_000, 60);
    check(
        &run(&fx, &q).await,
        &q,
        &[
            (1, 1, 0, 250, 250),
            (1, 0, 1, 750, 750),
            (0, 0, 0, 0, 0),
            (2, 0, 0, 100, 60),
            (0, 0, 0, 0, 0),
        ],
    );
    let q = query(&s, "acme", 60_000, 120_000, 30);
    check(
        &run(&fx, &q).await,
        &q,
        &[(0, 0, 0, 0, 0), (1, 0, 1, 750, 750)],
    );
    // A last bucket shorter than the others; the attempt at 300 s is in it.
    let q = query(&s, "acme", 170_000, 300_001, 120);
    check(
        &run(&fx, &q).await,
        &q,
        &[(2, 0, 0, 100, 60), (1, 0, 0, 0, 0)],
    );
    let q = query(&s, "acme", 290_000, 300_001, 60);
    check(&run(&fx, &q).await, &q, &[(1, 0, 0, 0, 0)]);
}

/// Only the tenant's attempts count, and with an endpoint only that endpoint's.
pub async fn activity_is_scoped(fx: Fixture) {
    let s = scenario(&fx).await;
    let mut q = query(&s, "acme", 0, 300_000, 60);
    q.endpoint = Some(s.first);
    check(
        &run(&fx, &q).await,
        &q,
        &[
            (1, 1, 0, 250, 250),
            (0, 0, 1, 0, 0),
            (0, 0, 0, 0, 0),
            (2, 0, 0, 100, 60),
            (0, 0, 0, 0, 0),
        ],
    );
    q.endpoint = Some(s.second);
    check(
        &run(&fx, &q).await,
        &q,
        &[
            (0, 0, 0, 0, 0),
            (1, 0, 0, 750, 750),
            (0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0),
            (0, 0, 0, 0, 0),
        ],
    );
    let q = query(&s, "other", 0, 300_000, 100);
    check(
        &run(&fx, &q).await,
        &q,
        &[(0, 0, 0, 0, 0), (1, 0, 0, 100, 100), (0, 0, 0, 0, 0)],
    );
    let q = query(&s, "nobody", 0, 300_000, 300);
    check(&run(&fx, &q).await, &q, &[(0, 0, 0, 0, 0)]);
}

/// A range that is empty, reversed, longer than 24 h or of more than 1,440 buckets, or a
/// bucket that is not whole seconds, is `InvalidInput`.
pub async fn activity_refuses_unbounded_ranges(fx: Fixture) {
    let s = Scenario {
        t0: now(&fx),
        first: EndpointId::generate(now(&fx), &outboxkit_core::OsEntropy),
        second: EndpointId::generate(now(&fx), &outboxkit_core::OsEntropy),
    };
    let day = 24 * 3600 * 1000;
    let mut half = query(&s, "acme", 0, 60_000, 1);
    half.bucket = Duration::from_millis(1_500);
    for (what, q) in [
        ("empty", query(&s, "acme", 1_000, 1_000, 60)),
        ("reversed", query(&s, "acme", 2_000, 1_000, 60)),
        ("over a day", query(&s, "acme", 0, day + 1, 600)),
        ("too many buckets", query(&s, "acme", 0, 1_441_000, 1)),
        ("zero bucket", query(&s, "acme", 0, 60_000, 0)),
        ("half seconds", half),
    ] {
        assert_kind(
            fx.console().activity(&q).await,
            ErrorKind::InvalidInput,
            what,
        );
    }
    assert_eq!(run(&fx, &query(&s, "acme", 0, day, 60)).await.len(), 1_440);
    let _ = (s.first, s.second);
}
