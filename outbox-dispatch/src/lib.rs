#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod alerts;
mod broker;
mod builder;
mod config;
mod dedup;
mod deliver;
mod email;
mod handler;
mod lease;
mod limits;
#[cfg(feature = "metrics")]
mod metrics;
mod ops;
mod report;
mod timer;
mod webhook;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::{Id, JoinSet};
use tracing::Instrument;

#[cfg(feature = "metrics")]
pub use self::metrics::{record_stats, MetricsObserver};
pub use alerts::{AlertEmail, AlertWebhook, DeadLetterAlerts, ALERT_LIST_LIMIT};
pub use broker::BrokerSink;
pub use builder::DispatcherBuilder;
pub use config::DispatcherConfig;
pub use email::{LiteralRecipients, MailComposer, PayloadComposer, RecipientResolver};
pub use handler::{Context, Dedup, Handler, HandlerOptions, HandlerResult};
pub use ops::{EndpointAdmin, NewEndpoint, Operator};
pub use report::{
    ClaimEvent, DeadLetterEvent, DeliveryEvent, Observer, Report, SettleEvent, TopicReport,
    DEAD_IDS_LIMIT,
};
pub use timer::{DynTimer, Timer, TimerExt};
pub use webhook::{endpoint_gate, forward_traceparent, open_secrets, signed_request, webhook_body};

use self::dedup::DedupCache;
use self::deliver::{deliver, Done, Meta, RunState};
use self::report::observe;
use self::webhook::EndpointCache;
use outboxkit_core::claim::{ClaimRequest, Completion, Lease};
use outboxkit_core::endpoint::Consumer;
use outboxkit_core::error::{ErrorKind, Result};
use outboxkit_core::ids::ConsumerName;
use outboxkit_core::mail::DynMailer;
use outboxkit_core::model::DeadReason;
use outboxkit_core::retry::TenantPolicy;
use outboxkit_core::signing::HeaderNames;
use outboxkit_core::store::DynStore;
use outboxkit_core::time::{DynEntropy, Timestamp};
use outboxkit_core::transport::DynWebhookTransport;
use outboxkit_core::vault::DynSecretVault;
use outboxkit_core::verdict::Verdict;

pub(crate) struct Registered {
    pub(crate) consumer: Consumer,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) options: HandlerOptions,
    pub(crate) semaphore: Arc<Semaphore>,
    pub(crate) dedup: std::sync::Mutex<DedupCache>,
}

pub(crate) struct WebhookChannel {
    pub(crate) transport: Arc<DynWebhookTransport>,
    pub(crate) vault: Arc<DynSecretVault>,
    pub(crate) policy: TenantPolicy,
    pub(crate) claim_budget: u32,
}

pub(crate) struct MailChannel {
    pub(crate) mailer: Arc<DynMailer>,
    pub(crate) policy: TenantPolicy,
    pub(crate) claim_budget: u32,
    pub(crate) resolver: Arc<dyn RecipientResolver>,
    pub(crate) composer: Arc<dyn MailComposer>,
}

pub(crate) struct Shared {
    pub(crate) store: Arc<DynStore>,
    pub(crate) clock: Arc<DynTimer>,
    pub(crate) entropy: Arc<DynEntropy>,
    pub(crate) config: DispatcherConfig,
    pub(crate) names: HeaderNames,
    pub(crate) handlers: BTreeMap<ConsumerName, Registered>,
    pub(crate) webhooks: Option<WebhookChannel>,
    pub(crate) mail: Option<MailChannel>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    pub(crate) registered: tokio::sync::OnceCell<()>,
    pub(crate) limits: limits::EndpointLimits,
    pub(crate) alerts: Option<Arc<alerts::Alerter>>,
    /// Broker sinks, by consumer name (the broker channel, `broker.rs`).
    pub(crate) brokers: BTreeMap<ConsumerName, broker::RegisteredSink>,
}

/// Runs deliveries. Build one with [`Dispatcher::builder`]; clone it freely (clones share
/// configuration, not runs).
#[derive(Clone)]
pub struct Dispatcher {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("handlers", &self.shared.handlers.keys().collect::<Vec<_>>())
            .field("webhooks", &self.shared.webhooks.is_some())
            .field("mail", &self.shared.mail.is_some())
            .field("config", &self.shared.config)
            .finish()
    }
}

/// What the loop does besides running deliveries.
enum Mode<S> {
    Forever(S),
    Once,
}

impl Dispatcher {
    /// Start building a dispatcher over `store`.
    pub fn builder(store: Arc<DynStore>) -> DispatcherBuilder {
        DispatcherBuilder::new(store)
    }

    /// Persist the registered consumers so fan-out at enqueue sees them. `run` and
    /// `run_once` call this; call it yourself at start-up when you enqueue before the first
    /// run.
    pub async fn register(&self) -> Result<()> {
        self.shared
            .registered
            .get_or_try_init(|| async {
                for reg in self.shared.handlers.values() {
                    self.shared.store.put_consumer(&reg.consumer).await?;
                }
                broker::register_sinks(&self.shared).await?;
                Ok::<(), outboxkit_core::Error>(())
            })
            .await?;
        Ok(())
    }

    /// Operator calls (replay, release held, retry now, purge, stats) on this dispatcher's
    /// store and clock.
    pub fn operator(&self) -> Operator {
        Operator::new(self.shared.store.clone(), self.shared.clock.clone())
    }

    /// Run until `shutdown` resolves; then finish in-flight deliveries within the grace
    /// period and release the rest with their attempts refunded.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send) -> Result<Report> {
        self.register().await?;
        let run = Arc::new(RunState::new(None));
        self.drive(run, Mode::Forever(Box::pin(shutdown))).await
    }

    /// Drain what is due until the soft `budget` is spent: a delivery starts only when its
    /// timeout plus the reservation margin fits in what remains; the rest is released.
    pub async fn run_once(&self, budget: Duration) -> Result<Report> {
        self.register().await?;
        let deadline = self.shared.clock.now().saturating_add(budget);
        let run = Arc::new(RunState::new(Some(deadline)));
        self.drive(
            run,
            Mode::<std::pin::Pin<Box<std::future::Ready<()>>>>::Once,
        )
        .await
    }

    /// The least time any delivery needs reserved before it starts.
    fn min_reservation(&self) -> Duration {
        let s = &self.shared;
        let handler = s.handlers.values().map(|r| r.options.timeout).min();
        let webhook = s.webhooks.is_some().then_some(s.config.webhook_timeout);
        let mail = s.mail.is_some().then_some(s.config.mail_deadline());
        let sink = s.brokers.values().map(|r| r.sink.deadline()).min();
        handler
            .into_iter()
            .chain(webhook)
            .chain(mail)
            .chain(sink)
            .min()
            .unwrap_or_default()
            + s.config.reservation_margin
    }

    fn claim_request(&self, run: &RunState, size: usize, now: Timestamp) -> Option<ClaimRequest> {
        let s = &self.shared;
        let size = u32::try_from(size)
            .unwrap_or(u32::MAX)
            .min(s.config.batch_size);
        let mut req = ClaimRequest::new(size, s.config.lease)
            .dormant_topics(s.config.dormant_topics.iter().cloned());
        let mut any = false;
        for (name, reg) in &s.handlers {
            if run.tripped_until(name, now).is_none() && reg.semaphore.available_permits() > 0 {
                req = req.handler(name.clone(), reg.options.retry.max_attempts());
                any = true;
            }
        }
        for (name, reg) in &s.brokers {
            if reg.semaphore.available_permits() > 0 {
                req = req.handler(name.clone(), reg.sink.retry_budget());
                any = true;
            }
        }
        if let Some(w) = &s.webhooks {
            req = req.webhooks(w.claim_budget);
            any = true;
        }
        if let Some(m) = &s.mail {
            if m.mailer.available() {
                req = req.email(m.claim_budget);
                any = true;
            }
        }
        any.then_some(req)
    }

    async fn drive<S: Future<Output = ()> + Unpin>(
        &self,
        run: Arc<RunState>,
        mut mode: Mode<S>,
    ) -> Result<Report> {
        let s = &self.shared;
        let start = s.clock.now();
        let mut report = Report::default();
        let mut tasks: JoinSet<Done> = JoinSet::new();
        let mut leases: HashMap<Id, Lease> = HashMap::new();
        let mut finished: Vec<Done> = Vec::new();
        // At most one batch of completions is being written while the loop claims on.
        let mut settling: Option<tokio::task::JoinHandle<Report>> = None;
        // How many deliveries that settle holds: they still hold their leases, so they count
        // against `concurrency` like running ones (memory and completion size stay bounded).
        let mut settling_len = 0usize;
        // Refill in batches, not one free slot at a time.
        let refill = (s.config.concurrency.min(s.config.batch_size as usize) / 2).max(1);
        let mut listener = s.store.wake_listener();
        loop {
            while let Some(r) = tasks.try_join_next_with_id() {
                finished.push(Self::joined(r, &mut leases));
            }
            if settling.as_ref().is_some_and(|h| h.is_finished()) {
                report.absorb(settled(&mut settling).await);
                settling = None;
                settling_len = 0;
            }
            if settling.is_none() && !finished.is_empty() {
                settling_len = finished.len();
                settling = Some(tokio::spawn(settle(
                    s.clone(),
                    std::mem::take(&mut finished),
                )));
            }
            // A busy loop never reaches the idle wait below: look at the shutdown signal on
            // every turn (a future is never polled again once it has completed).
            if !run.stopping.is_cancelled() {
                if let Mode::Forever(signal) = &mut mode {
                    if futures::FutureExt::now_or_never(signal).is_some() {
                        run.shut_down();
                    }
                }
            }
            let now = s.clock.now();
            let spent = run
                .deadline
                .is_some_and(|d| now.saturating_add(self.min_reservation()) > d);
            if run.stopping.is_cancelled() || spent {
                break;
            }
            let held = tasks.len() + finished.len() + settling_len;
            let free = s.config.concurrency.saturating_sub(held);
            if free >= refill {
                if let Some(req) = self.claim_request(&run, free, now) {
                    let span = tracing::debug_span!("outbox.claim", batch_size = req.batch_size());
                    let watch = outboxkit_core::Stopwatch::start();
                    let claim = s.store.claim(&req).instrument(span).await;
                    if let Some(o) = &s.observer {
                        let event = ClaimEvent {
                            size: claim.as_ref().map_or(0, Vec::len),
                            duration: watch.elapsed(),
                            failed: claim.is_err(),
                        };
                        observe(|| o.on_claim(&event));
                    }
                    match claim {
                        Ok(batch) if !batch.is_empty() => {
                            report.batches += 1;
                            if let Some(o) = &s.observer {
                                observe(|| o.on_batch(batch.len()));
                            }
                            let endpoints = Arc::new(EndpointCache::default());
                            for claimed in batch {
                                report.record_claim(&claimed.delivery.topic);
                                let span = tracing::info_span!(
                                    "outbox.delivery",
                                    delivery_id = %claimed.delivery.id,
                                    topic = %claimed.delivery.topic,
                                    kind = claimed.delivery.destination.kind().as_str(),
                                    // Webhooks only: an e-mail recipient is never logged.
                                    endpoint_id = claimed.delivery.destination.endpoint().map(tracing::field::display),
                                    attempt = claimed.lease.attempts,
                                    // The producer's trace, to link this attempt to it.
                                    traceparent = outboxkit_core::Traceparent::from_headers(&claimed.message.headers).map(tracing::field::display),
                                );
                                let lease = claimed.lease.clone();
                                let h = tasks.spawn(
                                    deliver(s.clone(), run.clone(), endpoints.clone(), claimed)
                                        .instrument(span),
                                );
                                leases.insert(h.id(), lease);
                            }
                            continue;
                        }
                        Ok(_) => {}
                        // A bad request or configuration stops the run; an outage or a
                        // row the store cannot read must not stop delivery for everyone
                        // else: log it and try again after a pause.
                        Err(e)
                            if matches!(
                                e.kind(),
                                ErrorKind::InvalidInput | ErrorKind::Misconfigured
                            ) =>
                        {
                            return Err(e)
                        }
                        Err(e) => {
                            if e.is_retryable() {
                                tracing::warn!(error = %e, "claim failed; backing off");
                            } else {
                                tracing::error!(error = %e, "claim failed; backing off");
                            }
                            tokio::time::sleep(s.config.poll_interval.min(Duration::from_secs(1)))
                                .await;
                            continue;
                        }
                    }
                }
            }
            if matches!(mode, Mode::Once)
                && tasks.is_empty()
                && settling.is_none()
                && finished.is_empty()
            {
                break;
            }
            let woken = async {
                match listener.as_mut() {
                    Some(l) => l.woken().await,
                    None => std::future::pending().await,
                }
            };
            let shutdown = async {
                match &mut mode {
                    Mode::Forever(s) => s.await,
                    Mode::Once => std::future::pending().await,
                }
            };
            let mut written = None;
            tokio::select! {
                Some(r) = tasks.join_next_with_id(), if !tasks.is_empty() => finished.push(Self::joined(r, &mut leases)),
                r = settled(&mut settling), if settling.is_some() => written = Some(r),
                () = woken => {}
                () = s.clock.sleep(s.config.poll_interval) => {}
                () = shutdown => run.shut_down(),
            }
            if let Some(r) = written {
                settling = None;
                settling_len = 0;
                report.absorb(r);
            }
        }
        // Stop: let in-flight work finish within the grace period (run) or by its
        // reservation (run_once); what has not started releases itself.
        run.stopping.cancel();
        let grace_end = match run.deadline {
            Some(d) => d.saturating_add(s.config.reservation_margin),
            None => s.clock.now().saturating_add(s.config.shutdown_grace),
        };
        loop {
            tokio::select! {
                r = tasks.join_next_with_id() => match r {
                    Some(r) => finished.push(Self::joined(r, &mut leases)),
                    None => break,
                },
                () = s.clock.sleep_until(grace_end) => break,
            }
        }
        tasks.abort_all();
        while let Some(r) = tasks.join_next_with_id().await {
            finished.push(Self::joined(r, &mut leases));
        }
        if settling.is_some() {
            report.absorb(settled(&mut settling).await);
        }
        report.absorb(settle(s.clone(), finished).await);
        report.run_time = s.clock.now().duration_since(start);
        report.stats = tokio::time::timeout(s.config.stats_deadline, s.store.stats())
            .await
            .ok()
            .and_then(|r| r.ok());
        tracing::info!(%report, "outbox dispatcher run finished");
        Ok(report)
    }

    fn joined(
        r: std::result::Result<(Id, Done), tokio::task::JoinError>,
        leases: &mut HashMap<Id, Lease>,
    ) -> Done {
        match r {
            Ok((id, done)) => {
                leases.remove(&id);
                done
            }
            Err(e) => match leases.remove(&e.id()) {
                // Aborted at shutdown, or a bug panicked the task: put it back.
                Some(lease) => Done::Release {
                    lease,
                    delay: Duration::ZERO,
                    duplicate: false,
                },
                None => Done::LeaseLost,
            },
        }
    }
}

/// Write what finished — verdicts in one `complete_many`, releases grouped by delay — and
/// return what that adds to the report. Runs beside the claim loop, so a batch's completion
/// overlaps the next batch's claim.
async fn settle(shared: Arc<Shared>, finished: Vec<Done>) -> Report {
    let watch = outboxkit_core::Stopwatch::start();
    let mut report = Report::default();
    let s = &shared;
    let mut items: Vec<(Lease, Completion)> = Vec::new();
    let mut metas: Vec<Meta> = Vec::new();
    let mut releases: BTreeMap<Duration, Vec<Lease>> = BTreeMap::new();
    for done in finished {
        match done {
            Done::Completed {
                lease,
                completion,
                meta,
            } => {
                items.push((lease, completion));
                metas.push(meta);
            }
            Done::Release {
                lease,
                delay,
                duplicate,
            } => {
                if duplicate {
                    report.duplicate_in_run += 1;
                }
                releases.entry(delay).or_default().push(lease);
            }
            Done::LeaseLost => report.lease_lost += 1,
        }
    }
    if !items.is_empty() {
        match retry_store(|| s.store.complete_many(&items)).await {
            Ok(results) => {
                for (((lease, completion), meta), r) in items.iter().zip(&metas).zip(results) {
                    match r {
                        Ok(()) => completed(s, &mut report, lease, completion, meta),
                        Err(e) if e.is_lease_lost() => report.lease_lost += 1,
                        Err(e) => {
                            tracing::warn!(error = %e, delivery_id = %lease.delivery_id, "completing a delivery failed; its lease will expire")
                        }
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, count = items.len(), "completing deliveries failed; their leases will expire and they will run again")
            }
        }
    }
    for (delay, leases) in releases {
        match retry_store(|| s.store.release(&leases, delay)).await {
            Ok(r) => {
                report.released += u64::from(r.released);
                report.lease_lost += u64::from(r.lost);
            }
            Err(e) => {
                tracing::warn!(error = %e, "releasing deliveries failed; their leases will expire")
            }
        }
    }
    if let Some(o) = &s.observer {
        let event = SettleEvent {
            completed: report.completed(),
            released: report.released,
            lease_lost: report.lease_lost,
            duration: watch.elapsed(),
        };
        observe(|| o.on_settle(&event));
    }
    report
}

fn completed(
    shared: &Shared,
    report: &mut Report,
    lease: &Lease,
    completion: &Completion,
    meta: &Meta,
) {
    report.record_verdict(&meta.topic, lease.delivery_id, &completion.verdict);
    tracing::debug!(delivery_id = %lease.delivery_id, verdict = completion.verdict.name(), "delivery completed");
    if let Some(o) = &shared.observer {
        let event = DeliveryEvent {
            delivery_id: lease.delivery_id,
            topic: &meta.topic,
            kind: meta.kind,
            attempt: meta.attempt,
            verdict: &completion.verdict,
            duration: meta.duration,
        };
        observe(|| o.on_delivery(&event));
    }
    if let Verdict::Dead { reason } = completion.verdict {
        dead_letter(shared, lease, meta, reason);
    }
}

/// Tell the observer and the operator's alerts that a delivery went dead (never waits).
fn dead_letter(shared: &Shared, lease: &Lease, meta: &Meta, reason: DeadReason) {
    if let Some(o) = &shared.observer {
        let event = DeadLetterEvent {
            delivery_id: lease.delivery_id,
            tenant: &meta.tenant,
            topic: &meta.topic,
            kind: meta.kind,
            reason,
            attempts: meta.attempt,
        };
        observe(|| o.on_dead(&event));
    }
    if let Some(a) = &shared.alerts {
        a.dead(alerts::DeadItem {
            delivery_id: lease.delivery_id,
            tenant: meta.tenant.clone(),
            topic: meta.topic.clone(),
            kind: meta.kind,
            reason,
            attempts: meta.attempt,
        });
    }
}

/// Wait for the settle in flight (never resolves when there is none).
async fn settled(settling: &mut Option<tokio::task::JoinHandle<Report>>) -> Report {
    match settling {
        Some(h) => h.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "writing completions failed; their leases will expire");
            Report::default()
        }),
        None => std::future::pending().await,
    }
}

/// Call the store up to three times while it says the failure is retryable.
async fn retry_store<T, F, Fut>(mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut wait = Duration::from_millis(50);
    let mut tries = 0;
    loop {
        match f().await {
            Err(e) if e.is_retryable() && tries < 3 => {
                tries += 1;
                tokio::time::sleep(wait).await;
                wait *= 4;
            }
            other => return other,
        }
    }
}
