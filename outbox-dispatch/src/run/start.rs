//! Claiming and starting deliveries: the claim step, the claim-ahead queue it fills, and
//! where each delivery runs (on the loop's own task, [`Inline`], or a task of its own); and
//! what a delivery that did not finish hands back.

use foldhash::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio::task::{Id, JoinError};
use tracing::Instrument;

use super::{settled, RunLoop, Woke};
use crate::attempt::{Done, RunState};
use crate::deliver::deliver;
use crate::report::{observe, ClaimEvent};
use crate::webhook::EndpointCache;
use outboxkit_core::claim::{Claimed, Lease};
use outboxkit_core::error::{ErrorKind, Result};
use outboxkit_core::ids::EndpointId;
use outboxkit_core::model::Destination;

/// A webhook or e-mail delivery run on the loop's own task. Dropping it aborts it (its
/// lease is then released, attempt refunded, as for an aborted task); a panic is caught
/// and releases the delivery due after a poll interval, as a panicking task does (a panic
/// of the transport itself is caught inside and spends the attempt).
pub(super) struct Inline {
    pub(super) lease: Lease,
    /// The endpoint of a webhook delivery (counted against its cap until it finishes).
    endpoint: Option<EndpointId>,
    /// How long a delivery that panicked waits before it is due again.
    pause: Duration,
    state: Arc<RunState>,
    run: Pin<Box<dyn Future<Output = std::thread::Result<Done>> + Send>>,
}

impl Future for Inline {
    type Output = Done;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Done> {
        let this = self.get_mut();
        match this.run.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(done)) => Poll::Ready(done),
            Poll::Ready(Err(_)) => {
                tracing::error!(delivery_id = %this.lease.delivery_id, "a delivery panicked; releasing it for a poll interval");
                Poll::Ready(unfinished(&this.state, this.lease.clone(), this.pause))
            }
        }
    }
}

/// Whether a delivery runs on the loop's task (webhooks, e-mail: the transports' async
/// I/O) or on a task of its own (handlers and broker sinks: user code that may block).
fn runs_inline(destination: &Destination) -> bool {
    matches!(destination, Destination::Webhook(_) | Destination::Email(_))
}

/// What a claim in flight brings back.
pub(super) struct ClaimDone {
    result: Result<Vec<Claimed>>,
    duration: Duration,
    /// The batch size it asked for (held against the capacity while it is in flight).
    asked: usize,
    /// It asked for webhooks and e-mail.
    wide: bool,
    /// The loop's progress count when it was sent (see `RunLoop::progress`).
    sent_at: u64,
}

/// A claim in flight, polled by the claim step (and by `finish`).
pub(super) type InFlight = Pin<Box<dyn Future<Output = ClaimDone> + Send>>;

/// What one claim step did.
pub(super) enum Claim {
    /// Work was claimed and spawned: go round again at once.
    Spawned,
    /// Nothing was claimed (no free slots, nothing due, nothing to ask for).
    Idle,
    /// Nothing was claimed, but deliveries finished or were written while the claim was
    /// out: the room it asked with is stale, so go round and ask again at once.
    Again,
    /// The store failed: pause, then go round again.
    Failed,
}

impl<S: Future<Output = ()> + Unpin> RunLoop<S> {
    /// Start ready deliveries while slots are free. One whose lease no longer covers its
    /// deadline plus the reservation margin goes back unstarted, attempt refunded.
    pub(super) fn start_ready(&mut self) {
        if self.ready.is_empty() {
            return;
        }
        let now = self.shared.clock.now();
        let mut batch = Vec::new();
        // Running deliveries only: finished ones waiting for their write hold `capacity`
        // (the claim step counts them), not a running slot.
        while self.active() + batch.len() < self.shared.config.concurrency {
            let Some((claimed, claimed_at, endpoints)) = self.ready.pop_front() else {
                break;
            };
            // A consumer found paused since the claim: back unstarted, attempt refunded (it
            // is not claimed again while paused).
            if let Destination::Handler(name) = &claimed.delivery.destination {
                if self.run.paused.is_paused(name) {
                    self.finished.push(Done::release_now(claimed.lease));
                    continue;
                }
            }
            // The configured lease covers the deadline plus the margin (checked at build);
            // what it covers beyond that is the slack a delivery may spend waiting here.
            // Measured from when the claim returned, so the claim's own round trip (which
            // the store's lease already started counting) is not held against it.
            let need = self.dispatcher.deadline_of(&claimed.delivery.destination)
                + self.shared.config.reservation_margin;
            let slack = self.shared.config.lease.saturating_sub(need);
            if now.duration_since(claimed_at) > slack {
                self.finished.push(Done::release_now(claimed.lease));
                continue;
            }
            batch.push((claimed, endpoints));
        }
        if !batch.is_empty() {
            self.spawn_batch(batch);
        }
    }

    /// Start claims while the room allows (running slots plus the claim-ahead queue, less
    /// what the claims in flight asked for) and the store runs them in parallel; then wait
    /// for one to return and start what fits. A claim that found nothing while others are in
    /// flight waits for them: the step is `Idle` only when no claim is left in flight, so
    /// the loop never sleeps on a claim it does not poll.
    pub(super) async fn claim_step(&mut self) -> Result<Claim> {
        self.start_claims().await;
        let (mut failed, mut again) = (false, false);
        let pause = self.shared.config.poll_interval;
        while !self.claims.is_empty() {
            // Deliveries and the settle go on while the store answers: what finishes is
            // collected, written and replaced by a ready delivery without waiting for the
            // claim (with claims side by side, one is nearly always out).
            let done = loop {
                let claims = &mut self.claims;
                let inline = &mut self.inline;
                let tasks = &mut self.tasks;
                let leases = &mut self.leases;
                let run = &self.run;
                let settling = &mut self.settling;
                let woke = tokio::select! {
                    biased;
                    Some(done) = claims.next() => break done,
                    Some(done) = inline.next(), if !inline.is_empty() => Woke::Task(done),
                    Some(r) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                        Woke::Task(joined(r, leases, run, pause))
                    }
                    r = settled(settling), if settling.is_some() => Woke::Settled(r),
                };
                self.woke(woke);
                self.start_ready();
                self.start_settle();
            };
            match self.claimed(done)? {
                Claim::Spawned => return Ok(Claim::Spawned),
                Claim::Failed => failed = true,
                Claim::Again => again = true,
                Claim::Idle => {}
            }
        }
        Ok(match (failed, again) {
            (true, _) => Claim::Failed,
            (false, true) => Claim::Again,
            (false, false) => Claim::Idle,
        })
    }

    /// Start claims until the room left is below a refill, the store's parallel claims are
    /// all in flight (one only, unless the last claim came back full), or there is nothing
    /// to ask for.
    async fn start_claims(&mut self) {
        let s = self.shared.clone();
        let mut refreshed = false;
        let side_by_side = if self.full { self.parallel_claims } else { 1 };
        while self.claims.len() < side_by_side {
            let held = self.running() + self.ready.len() + self.claiming;
            let free = self.capacity.saturating_sub(held);
            if free < self.refill {
                return;
            }
            // With claims side by side, one claim takes no more than its share of the
            // capacity, so the next finds room to start while it is out.
            let free = free.min((self.capacity / self.parallel_claims).max(self.refill));
            if !refreshed && (!s.handlers.is_empty() || !s.brokers.is_empty()) {
                self.run.paused.refresh(s.store.as_ref()).await;
                refreshed = true;
            }
            let wide = !self.wide_in_flight;
            let now = s.clock.now();
            // What the run holds per endpoint counts for the webhook part only.
            let held = if wide {
                self.held_per_endpoint()
            } else {
                HashMap::default()
            };
            let Some(req) = self
                .dispatcher
                .claim_request(&self.run, free, now, held, wide)
            else {
                return;
            };
            let asked = req.batch_size() as usize;
            let span = tracing::debug_span!("outbox.claim", batch_size = req.batch_size());
            let store = s.store.clone();
            let sent_at = self.progress;
            self.claiming += asked;
            self.wide_in_flight |= wide;
            self.claims.push(Box::pin(
                async move {
                    let watch = outboxkit_core::Stopwatch::start();
                    let result = store.claim(&req).await;
                    ClaimDone {
                        result,
                        duration: watch.elapsed(),
                        asked,
                        wide,
                        sent_at,
                    }
                }
                .instrument(span),
            ));
        }
    }

    /// Take back what a claim in flight asked for.
    fn landed(&mut self, done: &ClaimDone) {
        self.claiming = self.claiming.saturating_sub(done.asked);
        if done.wide {
            self.wide_in_flight = false;
        }
    }

    /// Absorb a claim that returned: queue and start what it brought.
    fn claimed(&mut self, done: ClaimDone) -> Result<Claim> {
        self.landed(&done);
        let s = self.shared.clone();
        let claim = done.result;
        self.full = claim
            .as_ref()
            .is_ok_and(|b| !b.is_empty() && b.len() >= done.asked);
        if let Some(o) = &s.observer {
            let event = ClaimEvent {
                size: claim.as_ref().map_or(0, Vec::len),
                duration: done.duration,
                failed: claim.is_err(),
            };
            observe(|| o.on_claim(&event));
        }
        match claim {
            // An empty answer is the store's last word only if nothing was freed while the
            // claim was out (an endpoint at its cap when it was sent may have room now).
            Ok(batch) if batch.is_empty() && done.sent_at != self.progress => Ok(Claim::Again),
            Ok(batch) if batch.is_empty() => Ok(Claim::Idle),
            Ok(batch) => {
                self.record_batch(&batch);
                let claimed_at = s.clock.now();
                // One endpoint cache per claim batch: its deliveries read each endpoint once,
                // however many start rounds they take (the keyed secrets outlive it, bound
                // to the sealed bytes of the endpoint read).
                let endpoints = Arc::new(EndpointCache::default());
                self.ready.extend(
                    batch
                        .into_iter()
                        .map(|c| (c, claimed_at, endpoints.clone())),
                );
                self.start_ready();
                Ok(Claim::Spawned)
            }
            // A bad request or configuration stops the run; an outage or a row the store
            // cannot read must not stop delivery for everyone else: log it and try again
            // after a pause.
            Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Misconfigured) => {
                Err(e)
            }
            Err(e) => {
                if e.is_retryable() {
                    tracing::warn!(error = %e, "claim failed; backing off");
                } else {
                    tracing::error!(error = %e, "claim failed; backing off");
                }
                Ok(Claim::Failed)
            }
        }
    }

    /// Count a claimed batch in the report and tell the observer.
    fn record_batch(&mut self, batch: &[Claimed]) {
        self.report.batches += 1;
        if let Some(o) = &self.shared.observer {
            observe(|| o.on_batch(batch.len()));
        }
        for claimed in batch {
            self.report.record_claim(&claimed.delivery.topic);
        }
    }

    /// At the end of a run: wait for the claims still in flight and hand back, unstarted,
    /// what they took (attempts refunded).
    pub(super) async fn land_claims(&mut self) {
        while let Some(done) = self.claims.next().await {
            self.landed(&done);
            if let Ok(batch) = done.result {
                self.record_batch(&batch);
                for claimed in batch {
                    self.finished.push(Done::release_now(claimed.lease));
                }
            }
        }
    }

    /// The webhook deliveries this run holds per endpoint: claimed and waiting to start, or
    /// running (a claim takes no more for an endpoint than its cap less these).
    fn held_per_endpoint(&self) -> HashMap<EndpointId, usize> {
        let mut held = HashMap::default();
        let waiting = self
            .ready
            .iter()
            .map(|(c, _, _)| c.delivery.destination.endpoint());
        let running = self.inline.iter().map(|i| i.endpoint);
        for e in waiting.chain(running).flatten() {
            *held.entry(e).or_default() += 1;
        }
        held
    }

    /// One task per handler delivery, webhooks and e-mail on the loop's task; the
    /// deliveries of one claim batch share its endpoint cache.
    fn spawn_batch(&mut self, batch: Vec<(Claimed, Arc<EndpointCache>)>) {
        let s = &self.shared;
        for (claimed, endpoints) in batch {
            let span = tracing::info_span!(
                "outbox.delivery",
                delivery_id = %claimed.delivery.id,
                topic = %claimed.delivery.topic,
                kind = claimed.delivery.destination.kind().as_str(),
                // Webhooks only: an e-mail recipient is never logged.
                endpoint_id = claimed.delivery.destination.endpoint().map(tracing::field::display),
                attempt = claimed.lease.attempts,
                // The producer's trace, to link this attempt to it.
                traceparent = outboxkit_core::Traceparent::from_headers(&claimed.message.headers)
                    .map(tracing::field::display),
            );
            let lease = claimed.lease.clone();
            let endpoint = claimed.delivery.destination.endpoint();
            let inline = runs_inline(&claimed.delivery.destination);
            let run = deliver(s.clone(), self.run.clone(), endpoints, claimed).instrument(span);
            if inline {
                self.inline.push(Inline {
                    lease,
                    endpoint,
                    pause: s.config.poll_interval,
                    state: self.run.clone(),
                    run: Box::pin(AssertUnwindSafe(run).catch_unwind()),
                });
            } else {
                let h = self.tasks.spawn(run);
                self.leases.insert(h.id(), lease);
            }
        }
    }
}

/// What a joined task hands back; a task that did not finish (aborted at shutdown, or a
/// bug panicked it) puts its delivery back unstarted.
pub(super) fn joined(
    r: std::result::Result<(Id, Done), JoinError>,
    leases: &mut HashMap<Id, Lease>,
    run: &RunState,
    pause: Duration,
) -> Done {
    match r {
        Ok((id, done)) => {
            leases.remove(&id);
            done
        }
        // A task that panicked waits a poll interval, so a bug cannot hot-loop; one aborted
        // at shutdown is due again at once.
        Err(e) => match leases.remove(&e.id()) {
            Some(lease) if e.is_panic() => unfinished(run, lease, pause),
            Some(lease) => unfinished(run, lease, Duration::ZERO),
            None => Done::LeaseLost,
        },
    }
}

/// A delivery that did not finish (panicked, or aborted at shutdown) goes back unstarted,
/// due after `pause`, and this run may start it again when it is handed out again (as
/// after any release).
fn unfinished(run: &RunState, lease: Lease, pause: Duration) -> Done {
    run.started
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&lease.delivery_id);
    Done::release(lease, pause)
}
