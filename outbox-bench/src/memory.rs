//! The in-memory burn-down: the library's own overhead (dispatcher + `InMemoryStore`) beside
//! a bare loop over a `Vec` doing the same bookkeeping (claim in order with a token and a
//! lease, call the handler, record the attempt, mark succeeded). There is no target.

use std::sync::Arc;

use outboxkit_core::{Entropy, OsEntropy, Stopwatch, SystemClock, Timestamp};
use outboxkit_testing::InMemoryStore;

use crate::common::load;
use crate::common::{burn_down, payload, secs, BenchResult, Progress};
use crate::pg_dispatch::{burn_config, noop_dispatcher, BATCH, CONCURRENCY};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::timed::Timed;
use crate::Ctx;

/// The longest the library side may run: `InMemoryStore::claim` walks every due row, so a
/// burn-down of 1M takes tens of minutes; past the cap the rate of what completed is shown.
const CAP: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Processing,
    Succeeded,
}

struct Job {
    payload: Vec<u8>,
    state: State,
    attempts: u32,
    token: [u8; 16],
    lease_until: i64,
    completed_at: i64,
}

/// One attempt of the bare loop's ledger.
struct Attempt {
    job: usize,
    at: i64,
}

/// Claim batches in order, lease them, "handle" them, record and complete; returns the
/// number completed.
fn bare_loop(jobs: &mut [Job], batch: usize) -> u64 {
    let clock = SystemClock;
    let mut ledger: Vec<Attempt> = Vec::with_capacity(jobs.len());
    let mut next = 0usize;
    let mut done = 0u64;
    let mut claimed: Vec<usize> = Vec::with_capacity(batch);
    let mut tokens = vec![0u8; batch * 16];
    loop {
        let now = outboxkit_core::Clock::now(&clock).as_unix_millis();
        claimed.clear();
        OsEntropy.fill(&mut tokens);
        while claimed.len() < batch && next < jobs.len() {
            let j = &mut jobs[next];
            if j.state == State::Pending {
                let k = claimed.len() * 16;
                j.state = State::Processing;
                j.attempts += 1;
                j.token.copy_from_slice(&tokens[k..k + 16]);
                j.lease_until = now + 40_000;
                claimed.push(next);
            }
            next += 1;
        }
        if claimed.is_empty() {
            return done;
        }
        for &i in &claimed {
            std::hint::black_box(&jobs[i].payload);
            ledger.push(Attempt { job: i, at: now });
        }
        for &i in &claimed {
            let j = &mut jobs[i];
            j.state = State::Succeeded;
            j.completed_at = now;
            j.token = [0; 16];
            done += 1;
        }
        std::hint::black_box(ledger.last().map(|a| (a.job, a.at)));
    }
}

/// The burn-down of `n` deliveries over the in-memory store.
async fn ours(n: usize) -> BenchResult<(crate::common::BurnDown, String)> {
    let store = InMemoryStore::new(Arc::new(SystemClock));
    let timed = Arc::new(Timed::new(Arc::new(store.clone())));
    let progress = Progress::new(n as u64);
    let d = noop_dispatcher(timed.clone(), &progress, burn_config())?;
    d.register().await.map_err(crate::common::err("register"))?;
    load(&store, n).await?;
    let b = burn_down(&d, &progress, n as u64, Some(CAP)).await?;
    let why = timed.spent.breakdown(b.secs);
    Ok((b, why))
}

/// The in-memory burn-down beside the bare loop.
pub async fn dispatch(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(1_000_000);
    let scenario = "in-memory dispatch burn-down, no-op handler";
    let r = async {
        let (b, why) = ours(n).await?;
        let mut jobs: Vec<Job> = (0..n)
            .map(|i| Job {
                payload: payload(i),
                state: State::Pending,
                attempts: 0,
                token: [0; 16],
                lease_until: 0,
                completed_at: Timestamp::EPOCH.as_unix_millis(),
            })
            .collect();
        let sw = Stopwatch::start();
        let done = bare_loop(&mut jobs, BATCH as usize);
        let raw_secs = secs(&sw);
        if done != n as u64 || jobs.iter().any(|j| j.state != State::Succeeded) {
            return Err(format!("the bare loop completed {done} of {n}"));
        }
        std::hint::black_box(
            jobs.iter()
                .map(|j| j.lease_until + j.completed_at)
                .sum::<i64>(),
        );
        Ok::<_, String>((b, why, per_second(n as u64, raw_secs)))
    }
    .await;
    match r {
        Ok((b, why, raw)) => Row::measured(
            "memory-dispatch",
            scenario,
            ctx.scale.label(n),
            Figure::rate(b.rate),
            Some(Figure::rate(raw)),
            Target::None,
            format!(
                "no target; {}batch {BATCH}, concurrency {CONCURRENCY} (mean claim {:.0}); \
                 ours: {why}; baseline: bare loop over a Vec (claim, token, lease, attempt, \
                 complete)",
                if b.finished {
                    String::new()
                } else {
                    format!(
                        "STOPPED at the {} s cap after {} of {n} (rate of those); ",
                        CAP.as_secs(),
                        b.completed
                    )
                },
                b.mean_batch
            ),
        ),
        Err(e) => Row::not_run("memory-dispatch", scenario, Target::None, Status::Error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bare_loop_completes_every_job_once() {
        let mut jobs: Vec<Job> = (0..250)
            .map(|i| Job {
                payload: payload(i),
                state: State::Pending,
                attempts: 0,
                token: [0; 16],
                lease_until: 0,
                completed_at: 0,
            })
            .collect();
        assert_eq!(bare_loop(&mut jobs, 100), 250);
        assert!(jobs
            .iter()
            .all(|j| j.state == State::Succeeded && j.attempts == 1));
    }
}
