//! The run loop of one `run` or `run_once` call, as a handful of named steps:
//! [`RunLoop::reap`] collects finished deliveries, [`RunLoop::settle_step`] starts writing
//! what finished, [`RunLoop::claim_step`] claims and starts, [`RunLoop::wait`] sleeps until
//! something happens, and [`RunLoop::finish`] drains at the end.
//!
//! Handler deliveries run user code and get a task each (a `JoinSet`), so a handler that
//! blocks its thread stalls nothing else. Webhook and e-mail deliveries are async I/O:
//! they run on the loop's own task (a `FuturesUnordered` it polls, see [`Inline`]), as
//! does the settle, so a delivery costs no task, no hand-off between worker threads and
//! no wake-up of the loop from another thread.
//!
//! Claiming and starting deliveries (the claim step, the claim-ahead queue, [`Inline`]) is
//! in `run/start.rs`.

use foldhash::HashMap;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::task::{Id, JoinSet};

mod start;

use self::start::{joined, Claim, InFlight, Inline};
use super::attempt::{Done, RunState};
use super::settle::settle;
use super::{Dispatcher, Shared};
use crate::report::Report;
use crate::timer::TimerExt;
use crate::webhook::EndpointCache;
use outboxkit_core::claim::{Claimed, Lease};
use outboxkit_core::error::{ErrorKind, Result};
use outboxkit_core::time::Timestamp;
use outboxkit_core::wake::WakeListener;

/// What the loop does besides running deliveries.
pub(crate) enum Mode<S> {
    /// `run`: until the signal resolves.
    Forever(S),
    /// `run_once`: until nothing is due or the budget is spent.
    Once,
}

/// Deliveries claimed ahead at least, whatever the concurrency (bounded by the batch size).
const AHEAD_MIN: usize = 32;

/// A settle in flight, polled by the loop; a panic in it is caught and logged.
type Settling = Pin<Box<dyn Future<Output = Report> + Send>>;

/// The state of one run of the loop.
pub(crate) struct RunLoop<S> {
    dispatcher: Dispatcher,
    shared: Arc<Shared>,
    run: Arc<RunState>,
    mode: Mode<S>,
    start: Timestamp,
    report: Report,
    /// Handler deliveries, a task each.
    tasks: JoinSet<Done>,
    /// The lease of every running task, to release it when the task is aborted.
    leases: HashMap<Id, Lease>,
    /// Webhook and e-mail deliveries, polled by the loop itself.
    inline: FuturesUnordered<Inline>,
    /// Finished deliveries not yet handed to a settle.
    finished: Vec<Done>,
    /// At most one batch of completions is being written while the loop claims on (polled
    /// by the loop beside everything else it waits for). Its deliveries no longer count
    /// against `capacity`: the next claim does not wait for the write (at most one batch of
    /// at most `capacity` is written at a time, so held leases stay below twice `capacity`).
    settling: Option<Settling>,
    /// Claimed ahead of free slots, waiting to start (their leases run meanwhile): each
    /// with the time its claim returned and its claim batch's endpoint cache.
    ready: VecDeque<(Claimed, Timestamp, Arc<EndpointCache>)>,
    /// Claims in flight (polled by the claim step): at most the store's
    /// `parallel_claims`, of which at most one asks for webhooks and e-mail.
    claims: FuturesUnordered<InFlight>,
    /// What the claims in flight asked for at most (held against `capacity`).
    claiming: usize,
    /// A claim in flight asks for webhooks and e-mail.
    wide_in_flight: bool,
    /// The store's `parallel_claims` (at least 1).
    parallel_claims: usize,
    /// The last claim that returned brought all it asked for: more is likely due, so claims
    /// go out side by side (up to `parallel_claims`). After a short or empty answer, or a
    /// failure, one claim at a time: on a queue that is idle or nearly so, a second claim
    /// would only race the first for the same rows and CPU.
    full: bool,
    /// Deliveries finished plus settles written, counted: a claim that comes back empty
    /// when this has moved since it was sent asked with a room that may have grown since
    /// (see `Claim::Again`).
    progress: u64,
    /// The most deliveries held at once besides the settle in flight: running, finished,
    /// ready, and asked for by the claims in flight.
    capacity: usize,
    /// Refill in batches, not one free slot at a time.
    refill: usize,
    listener: Option<WakeListener>,
}

impl<S: Future<Output = ()> + Unpin> RunLoop<S> {
    pub(crate) fn new(dispatcher: &Dispatcher, run: Arc<RunState>, mode: Mode<S>) -> Self {
        let shared = dispatcher.shared.clone();
        let c = &shared.config;
        // Claim ahead of free slots, so a delivery that finishes finds the next one waiting
        // rather than paying a claim round trip (at concurrency 1 above all); deliveries
        // never wait longer than their lease allows (see `start_ready`).
        // Only when the lease leaves room to wait (at least the reservation margin beyond
        // the longest reservation): with a lease of about one reservation (deadline +
        // margin), a delivery claimed ahead could never start and would only be claimed
        // and released again, so none is claimed ahead.
        let reserve = dispatcher.max_reservation();
        let ahead = if c.lease.saturating_sub(reserve) >= c.reservation_margin {
            (c.batch_size as usize).min(c.concurrency.max(AHEAD_MIN))
        } else {
            0
        };
        let capacity = c.concurrency + ahead;
        let refill = (capacity.min(c.batch_size as usize) / 2).max(1);
        let listener = shared.store.wake_listener();
        let parallel_claims = shared.store.parallel_claims().max(1);
        RunLoop {
            dispatcher: dispatcher.clone(),
            start: shared.clock.now(),
            shared,
            run,
            mode,
            report: Report::default(),
            tasks: JoinSet::new(),
            leases: HashMap::default(),
            inline: FuturesUnordered::new(),
            finished: Vec::new(),
            settling: None,
            ready: VecDeque::new(),
            claims: FuturesUnordered::new(),
            claiming: 0,
            wide_in_flight: false,
            parallel_claims,
            full: false,
            progress: 0,
            capacity,
            refill,
            listener,
        }
    }

    /// Claim, run and settle until the run stops, then drain and report.
    pub(crate) async fn drive(mut self) -> Result<Report> {
        loop {
            self.reap();
            self.settle_step().await;
            self.watch_shutdown();
            if self.should_stop() {
                break;
            }
            self.start_ready();
            match self.claim_step().await? {
                Claim::Spawned | Claim::Again => continue,
                Claim::Failed => {
                    let pause = self.shared.config.poll_interval.min(Duration::from_secs(1));
                    self.pause(pause).await;
                    continue;
                }
                Claim::Idle => {}
            }
            if self.drained() {
                // Deliveries handed back over a rate limit are work this run can still do:
                // wait for them while the budget lasts, rather than end with them due.
                match self.rate_wait() {
                    Some(due) => {
                        self.shared.clock.sleep_until(due).await;
                        continue;
                    }
                    None => break,
                }
            }
            self.wait().await;
        }
        self.finish().await
    }

    /// Collect the deliveries that have finished, without waiting (this also drives the
    /// inline ones as far as they can go).
    fn reap(&mut self) {
        while let Some(r) = self.tasks.try_join_next_with_id() {
            let done = joined(
                r,
                &mut self.leases,
                &self.run,
                self.shared.config.poll_interval,
            );
            self.finished.push(done);
            self.progress += 1;
        }
        while let Some(Some(done)) = self.inline.next().now_or_never() {
            self.finished.push(done);
            self.progress += 1;
        }
    }

    /// Absorb a finished settle; start the next one when there is something to write.
    async fn settle_step(&mut self) {
        self.poll_settle();
        self.start_settle();
    }

    /// Start writing what finished when no write is in flight.
    fn start_settle(&mut self) {
        if self.settling.is_none() && !self.finished.is_empty() {
            let batch = std::mem::take(&mut self.finished);
            let write = AssertUnwindSafe(settle(self.shared.clone(), self.run.clone(), batch))
                .catch_unwind()
                .map(|r| {
                    r.unwrap_or_else(|_| {
                        tracing::error!("writing completions panicked; their leases will expire");
                        Report::default()
                    })
                });
            self.settling = Some(Box::pin(write));
            // An in-process store finishes at once; a remote one has its request sent.
            self.poll_settle();
        }
    }

    /// Drive the settle in flight without waiting; absorb it if it is done.
    fn poll_settle(&mut self) {
        if let Some(f) = &mut self.settling {
            if let Some(r) = f.as_mut().now_or_never() {
                self.settled(r);
            }
        }
    }

    /// Sleep for `pause` while the inline deliveries and the settle go on.
    async fn pause(&mut self, pause: Duration) {
        let sleep = tokio::time::sleep(pause);
        tokio::pin!(sleep);
        loop {
            let woke = tokio::select! {
                () = &mut sleep => return,
                Some(done) = self.inline.next(), if !self.inline.is_empty() => Woke::Task(done),
                r = settled(&mut self.settling), if self.settling.is_some() => Woke::Settled(r),
            };
            self.woke(woke);
        }
    }

    /// Record what a wait returned.
    fn woke(&mut self, woke: Woke) {
        match woke {
            Woke::Task(done) => {
                self.finished.push(done);
                self.progress += 1;
            }
            Woke::Settled(r) => self.settled(r),
            Woke::Shutdown => self.run.shut_down(),
            Woke::Other => {}
        }
    }

    fn settled(&mut self, r: Report) {
        self.settling = None;
        self.progress += 1;
        self.report.absorb(r);
    }

    /// A busy loop never reaches the idle wait: look at the shutdown signal on every turn
    /// (a future is never polled again once it has completed).
    fn watch_shutdown(&mut self) {
        if self.run.stopping.is_cancelled() {
            return;
        }
        if let Mode::Forever(signal) = &mut self.mode {
            if futures::FutureExt::now_or_never(signal).is_some() {
                self.run.shut_down();
            }
        }
    }

    /// Stopping, or `run_once` has too little budget left to start anything.
    fn should_stop(&self) -> bool {
        let now = self.shared.clock.now();
        let spent = self
            .run
            .deadline
            .is_some_and(|d| now.saturating_add(self.dispatcher.min_reservation()) > d);
        self.run.stopping.is_cancelled() || spent
    }

    /// Deliveries held against `capacity` besides the claim-ahead queue and the claims in
    /// flight: running, or finished and not yet handed to a settle. Those of the settle in
    /// flight do not count, so a claim overlaps their write instead of waiting for it; the
    /// next completion batch is still at most `capacity`.
    fn running(&self) -> usize {
        self.active() + self.finished.len()
    }

    /// Deliveries running: what `concurrency` caps. One that finished is not running while
    /// its completion is written, so the next starts at once rather than after the write.
    fn active(&self) -> usize {
        self.tasks.len() + self.inline.len()
    }

    /// When `run_once`, drained, should look again: the earliest due time of the
    /// deliveries it handed back over a rate limit, when one can still start within the
    /// budget.
    fn rate_wait(&self) -> Option<Timestamp> {
        let due = self.run.take_rate_due()?;
        let deadline = self.run.deadline?;
        (due.saturating_add(self.dispatcher.min_reservation()) <= deadline).then_some(due)
    }

    /// `run_once` has nothing running, ready, settling or left to write.
    fn drained(&self) -> bool {
        matches!(self.mode, Mode::Once)
            && self.ready.is_empty()
            && self.tasks.is_empty()
            && self.inline.is_empty()
            && self.settling.is_none()
            && self.finished.is_empty()
            && self.claims.is_empty()
    }

    /// Sleep until a task finishes, a settle is written, the store wakes us, the poll
    /// interval passes, or the shutdown signal arrives.
    async fn wait(&mut self) {
        if self.settling.is_none() && !self.finished.is_empty() {
            return; // something to write (e.g. a release from `start_ready`): go round
        }
        let s = &self.shared;
        let listener = &mut self.listener;
        let woken = async {
            match listener.as_mut() {
                Some(l) => l.woken().await,
                None => std::future::pending().await,
            }
        };
        let mode = &mut self.mode;
        let shutdown = async {
            match mode {
                Mode::Forever(s) => s.await,
                Mode::Once => std::future::pending().await,
            }
        };
        let pause = s.config.poll_interval;
        let tasks = &mut self.tasks;
        let leases = &mut self.leases;
        let run = &self.run;
        let inline = &mut self.inline;
        let settling = &mut self.settling;
        let woke = tokio::select! {
            Some(done) = inline.next(), if !inline.is_empty() => Woke::Task(done),
            Some(r) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                Woke::Task(joined(r, leases, run, pause))
            }
            r = settled(settling), if settling.is_some() => Woke::Settled(r),
            () = woken => Woke::Other,
            () = s.clock.sleep(s.config.poll_interval) => Woke::Other,
            () = shutdown => Woke::Shutdown,
        };
        self.woke(woke);
    }

    /// Stop: let in-flight work finish within the grace period (`run`) or by its
    /// reservation (`run_once`); what has not started releases itself. Then write
    /// everything and report.
    async fn finish(mut self) -> Result<Report> {
        let s = self.shared.clone();
        self.run.stopping.cancel();
        // Claims still in flight: what they bring back is never started.
        self.land_claims().await;
        // Claimed ahead, never started: back at once, attempts refunded.
        for (claimed, _, _) in std::mem::take(&mut self.ready) {
            self.finished.push(Done::release_now(claimed.lease));
        }
        let grace_end = match self.run.deadline {
            Some(d) => d.saturating_add(s.config.reservation_margin),
            None => s.clock.now().saturating_add(s.config.shutdown_grace),
        };
        while !(self.tasks.is_empty() && self.inline.is_empty()) {
            let pause = s.config.poll_interval;
            let tasks = &mut self.tasks;
            let leases = &mut self.leases;
            let run = &self.run;
            let inline = &mut self.inline;
            let settling = &mut self.settling;
            let woke = tokio::select! {
                Some(done) = inline.next(), if !inline.is_empty() => Woke::Task(done),
                Some(r) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    Woke::Task(joined(r, leases, run, pause))
                }
                r = settled(settling), if settling.is_some() => Woke::Settled(r),
                () = s.clock.sleep_until(grace_end) => break,
            };
            self.woke(woke);
        }
        self.tasks.abort_all();
        while let Some(r) = self.tasks.join_next_with_id().await {
            let done = joined(
                r,
                &mut self.leases,
                &self.run,
                self.shared.config.poll_interval,
            );
            self.finished.push(done);
        }
        // Still running at the end of the grace period: dropped (aborted), back unstarted.
        for aborted in std::mem::take(&mut self.inline) {
            self.finished.push(Done::release_now(aborted.lease));
        }
        if self.settling.is_some() {
            let r = settled(&mut self.settling).await;
            self.report.absorb(r);
        }
        let mut report = std::mem::take(&mut self.report);
        let finished = std::mem::take(&mut self.finished);
        report.absorb(settle(s.clone(), self.run.clone(), finished).await);
        report.run_time = s.clock.now().duration_since(self.start);
        report.circuits = s.breakers.not_closed();
        report.stats = tokio::time::timeout(s.config.stats_deadline, s.store.stats())
            .await
            .ok()
            .and_then(|r| r.ok());
        tracing::info!(%report, "outbox dispatcher run finished");
        Ok(report)
    }
}

/// The run loop spawned as a task of its own, aborted when this is dropped (as the loop
/// was when it ran inside the caller's future). A panic of the loop is the caller's.
pub(crate) struct Aborting(tokio::task::JoinHandle<Result<Report>>);

impl Aborting {
    pub(crate) fn spawn(drive: impl Future<Output = Result<Report>> + Send + 'static) -> Self {
        Aborting(tokio::spawn(drive))
    }

    /// Wait for the loop's report.
    pub(crate) async fn join(&mut self) -> Result<Report> {
        match (&mut self.0).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(outboxkit_core::error::Error::new(
                ErrorKind::Unavailable,
                "the dispatcher's run loop was cancelled (the runtime is shutting down)",
            )),
        }
    }
}

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A settle still in flight when the loop is dropped (its caller dropped `run`) finishes
/// on a task of its own: completions handed to the store are written.
impl<S> Drop for RunLoop<S> {
    fn drop(&mut self) {
        if let Some(write) = self.settling.take() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                drop(rt.spawn(write));
            }
        }
    }
}

/// What woke a wait of the loop.
enum Woke {
    Task(Done),
    Settled(Report),
    Shutdown,
    Other,
}

/// Wait for the settle in flight (never resolves when there is none); it is done then.
async fn settled(settling: &mut Option<Settling>) -> Report {
    match settling {
        Some(f) => {
            let r = f.as_mut().await;
            *settling = None;
            r
        }
        None => std::future::pending().await,
    }
}
