//! What every scenario shares: the scale, the payload, unique names, the burn-down driver.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{EntropyExt, NewMessage, OsEntropy, Stopwatch, Verdict};
use outboxkit_dispatch::{DeliveryEvent, Dispatcher, HandlerResult, Observer, Report};
use tokio::sync::Notify;
use tokio::task::JoinSet;

/// A scenario's failure, as the table shows it.
pub type BenchResult<T> = Result<T, String>;

/// Turn any error into the table's text.
pub fn err(what: &str) -> impl Fn(outboxkit_core::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Full or quick (`--quick`: every size divided by ten, the RSS pair 10k vs 100k), or one
/// size for every scenario (`--size N`, for profiling).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scale {
    /// Whether this is a quick run.
    pub quick: bool,
    /// `--size N`: this size instead of each scenario's own.
    pub size: Option<usize>,
}

impl Scale {
    /// `full` in a full run, a tenth of it (at least 1) in a quick one, or the override.
    pub fn n(&self, full: usize) -> usize {
        match self.size {
            Some(n) => n.max(1),
            None if self.quick => (full / 10).max(1),
            None => full,
        }
    }

    /// The size column: `100k`, `10k (quick)` or `50k (--size)`.
    pub fn label(&self, n: usize) -> String {
        let s = count_label(n);
        if self.size.is_some() {
            format!("{s} (--size)")
        } else if self.quick {
            format!("{s} (quick)")
        } else {
            s
        }
    }
}

/// `500`, `20k`, `1M`.
pub fn count_label(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

/// A fresh 8-hex-digit suffix for schema names, files and key prefixes.
pub fn unique() -> String {
    format!("{:08x}", OsEntropy.next_u64() as u32)
}

/// The topic every benchmark message carries.
pub const TOPIC: &str = "bench.order_created";

/// The consumer every handler benchmark registers.
pub const CONSUMER: &str = "bench";

/// The payload of message `i`: a realistic small JSON event (about 180 bytes).
pub fn payload(i: usize) -> Vec<u8> {
    format!(
        "{{\"order_id\":{i},\"customer\":\"c-{:06}\",\"total_cents\":{},\"currency\":\"EUR\",\
         \"items\":[{{\"sku\":\"sku-{:04}\",\"qty\":2}},{{\"sku\":\"sku-{:04}\",\"qty\":1}}],\
         \"note\":\"benchmark\"}}",
        i % 1_000_000,
        1000 + i % 90_000,
        i % 9973,
        (i * 7) % 9973
    )
    .into_bytes()
}

/// Message `i` as the library's input.
pub fn message(i: usize) -> NewMessage {
    NewMessage::raw(TOPIC, payload(i))
}

/// Seconds of a stopwatch.
pub fn secs(sw: &Stopwatch) -> f64 {
    sw.elapsed().as_secs_f64()
}

/// Counts successful deliveries and claim batches; wakes the driver at the target.
#[derive(Debug, Default)]
pub struct Progress {
    succeeded: AtomicU64,
    other: AtomicU64,
    /// `Retry` verdicts, counted apart when retries are expected.
    retried: AtomicU64,
    allow_retries: bool,
    batches: AtomicU64,
    claimed: AtomicU64,
    target: AtomicU64,
    done: Notify,
}

impl Progress {
    /// A counter that wakes [`Progress::wait`] once `target` deliveries succeeded.
    pub fn new(target: u64) -> Arc<Self> {
        let p = Progress::default();
        p.target.store(target, Ordering::Relaxed);
        Arc::new(p)
    }

    /// As [`Progress::new`], for a scenario whose handler fails on purpose: `Retry` verdicts
    /// are counted apart ([`Progress::retried`]) instead of as unexpected.
    pub fn allowing_retries(target: u64) -> Arc<Self> {
        let p = Progress {
            allow_retries: true,
            ..Progress::default()
        };
        p.target.store(target, Ordering::Relaxed);
        Arc::new(p)
    }

    /// `Retry` verdicts seen (with [`Progress::allowing_retries`]).
    pub fn retried(&self) -> u64 {
        self.retried.load(Ordering::Relaxed)
    }

    /// Wait until the target is reached.
    pub async fn wait(&self) {
        self.done.notified().await;
    }

    /// Deliveries that succeeded.
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
    }

    /// Deliveries that reached another verdict (should stay 0).
    pub fn other(&self) -> u64 {
        self.other.load(Ordering::Relaxed)
    }

    /// The mean number of deliveries per claim.
    pub fn mean_batch(&self) -> f64 {
        let b = self.batches.load(Ordering::Relaxed);
        if b == 0 {
            0.0
        } else {
            self.claimed.load(Ordering::Relaxed) as f64 / b as f64
        }
    }
}

impl Observer for Progress {
    fn on_batch(&self, size: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.claimed.fetch_add(size as u64, Ordering::Relaxed);
    }

    fn on_delivery(&self, event: &DeliveryEvent<'_>) {
        if matches!(event.verdict, Verdict::Succeeded) {
            let n = self.succeeded.fetch_add(1, Ordering::Relaxed) + 1;
            if n == self.target.load(Ordering::Relaxed) {
                self.done.notify_one();
            }
        } else if self.allow_retries && matches!(event.verdict, Verdict::Retry { .. }) {
            self.retried.fetch_add(1, Ordering::Relaxed);
        } else {
            self.other.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The no-op handler of the burn-down scenarios.
pub async fn noop(_ctx: outboxkit_dispatch::Context, _m: outboxkit_core::Message) -> HandlerResult {
    HandlerResult::Ok
}

/// What one burn-down measured.
#[derive(Debug)]
pub struct BurnDown {
    /// Seconds from `run` until every delivery was written as succeeded (or the cap).
    pub secs: f64,
    /// Deliveries per second.
    pub rate: f64,
    /// The mean claim size.
    pub mean_batch: f64,
    /// Deliveries that succeeded.
    pub completed: u64,
    /// Whether all of them did (false when the time cap stopped the run first).
    pub finished: bool,
    /// Deliveries claimed ÷ deliveries that reached a verdict (the report's
    /// `claims_per_delivery`; 0 when none did).
    pub claims_per_delivery: f64,
}

/// Run `dispatcher` (built with `progress` as its observer) until `n` deliveries succeeded,
/// then stop it; the time ends when `run` returns (every completion written). With `cap`,
/// stop after that long at the latest and report the rate of what was completed.
pub async fn burn_down(
    dispatcher: &Dispatcher,
    progress: &Arc<Progress>,
    n: u64,
    cap: Option<Duration>,
) -> BenchResult<BurnDown> {
    let cap = cap.unwrap_or(Duration::from_secs(3600));
    let sw = Stopwatch::start();
    let p = progress.clone();
    let report: Report = dispatcher
        .run(async move {
            tokio::select! {
                () = p.wait() => {}
                () = tokio::time::sleep(cap) => {}
            }
        })
        .await
        .map_err(err("dispatcher run"))?;
    let secs = secs(&sw);
    let completed = progress.succeeded();
    let finished = completed == n;
    if progress.other() != 0 || report.succeeded != completed || completed > n {
        return Err(format!(
            "expected {n} successes, saw {completed} (other verdicts {}; report: {report})",
            progress.other()
        ));
    }
    if !finished && cap >= Duration::from_secs(3600) {
        return Err(format!(
            "the burn-down did not finish within an hour ({completed} of {n})"
        ));
    }
    Ok(BurnDown {
        secs,
        rate: crate::report::per_second(completed, secs),
        mean_batch: progress.mean_batch(),
        completed,
        finished,
        claims_per_delivery: report.claims_per_delivery().unwrap_or(0.0),
    })
}

/// Enqueue `n` messages through `store` in batches of 1,000 (the backlog; not timed).
pub async fn load(store: &dyn outboxkit_core::MessageStore, n: usize) -> BenchResult<()> {
    for c in chunks(n, 1000) {
        store
            .enqueue_batch(c.map(message).collect())
            .await
            .map_err(err("load"))?;
    }
    Ok(())
}

/// Split `0..n` into chunks of at most `size`.
pub fn chunks(n: usize, size: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..n.div_ceil(size)).map(move |c| c * size..((c + 1) * size).min(n))
}

/// Run `job(i)` for `i` in `0..n` on `writers` tasks; returns the seconds taken.
pub async fn concurrently<F, Fut>(n: usize, writers: usize, job: F) -> BenchResult<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BenchResult<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let job = Arc::new(job);
    let sw = Stopwatch::start();
    let mut set = JoinSet::new();
    for _ in 0..writers {
        let (next, job) = (next.clone(), job.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<(), String>(());
                }
                job(i).await?;
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| format!("writer task: {e}"))??;
    }
    Ok(secs(&sw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_scale_divides_by_ten() {
        let full = Scale::default();
        let quick = Scale {
            quick: true,
            size: None,
        };
        let fixed = Scale {
            quick: true,
            size: Some(777),
        };
        assert_eq!(fixed.n(1_000_000), 777);
        assert_eq!(fixed.label(777), "777 (--size)");
        assert_eq!(full.n(100_000), 100_000);
        assert_eq!(quick.n(100_000), 10_000);
        assert_eq!(quick.n(5), 1);
        assert_eq!(full.label(100_000), "100k");
        assert_eq!(quick.label(10_000), "10k (quick)");
        assert_eq!(count_label(1_000_000), "1M");
        assert_eq!(count_label(1500), "1500");
    }

    #[test]
    fn chunks_cover_the_range() {
        let c: Vec<_> = chunks(2500, 1000).collect();
        assert_eq!(c, vec![0..1000, 1000..2000, 2000..2500]);
        assert_eq!(chunks(0, 10).count(), 0);
    }

    #[test]
    fn payloads_are_json_of_similar_size() {
        for i in [0, 7, 99_999, 1_000_000] {
            let p = payload(i);
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
            assert_eq!(v["order_id"], i);
            assert!((150..220).contains(&p.len()), "{}", p.len());
        }
    }
}
