#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod alerts;
mod attempt;
mod breaker;
mod broker;
mod builder;
mod config;
mod dedup;
mod deliver;
mod email;
mod handler;
mod jitter;
mod lease;
mod limits;
#[cfg(feature = "metrics")]
mod metrics;
mod paused;
mod permits;
mod report;
mod run;
mod settle;
mod timer;
mod webhook;

use foldhash::HashMap;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

#[cfg(feature = "metrics")]
pub use self::metrics::{record_stats, MetricsObserver};
pub use alerts::{AlertEmail, AlertWebhook, DeadLetterAlerts, ALERT_LIST_LIMIT};
pub use breaker::CircuitState;
pub use broker::BrokerSink;
pub use builder::DispatcherBuilder;
pub use config::DispatcherConfig;
pub use email::{LiteralRecipients, MailComposer, PayloadComposer, RecipientResolver};
pub use handler::{Context, Dedup, Handler, HandlerOptions, HandlerResult};
pub use outboxkit_core::ops::{EndpointAdmin, NewEndpoint, Operator};
pub use report::{
    CircuitEvent, ClaimEvent, DeadLetterEvent, DeliveryEvent, Observer, Report, SettleEvent,
    TopicReport, DEAD_IDS_LIMIT,
};
pub use timer::{DynTimer, Timer, TimerExt};
pub use webhook::{
    endpoint_gate, forward_traceparent, open_headers, open_secrets, signed_request,
    signed_request_keyed, webhook_body, with_custom_headers,
};

use self::attempt::RunState;
use self::dedup::DedupCache;
use self::run::{Mode, RunLoop};
use outboxkit_core::claim::ClaimRequest;
use outboxkit_core::endpoint::Consumer;
use outboxkit_core::error::{ErrorKind, Result};
use outboxkit_core::ids::{ConsumerName, EndpointId};
use outboxkit_core::mail::DynMailer;
use outboxkit_core::retry::TenantPolicy;
use outboxkit_core::signing::HeaderNames;
use outboxkit_core::store::DynStore;
use outboxkit_core::time::Timestamp;
use outboxkit_core::transport::DynWebhookTransport;
use outboxkit_core::vault::DynSecretVault;

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
    /// The endpoints' secrets, opened and keyed once per sealed secret.
    pub(crate) keys: webhook::SigningKeys,
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
    /// Retry jitter, drawn from the injected entropy in blocks (`jitter.rs`).
    pub(crate) jitter: jitter::Samples,
    pub(crate) config: DispatcherConfig,
    pub(crate) names: HeaderNames,
    pub(crate) handlers: BTreeMap<ConsumerName, Registered>,
    pub(crate) webhooks: Option<WebhookChannel>,
    pub(crate) mail: Option<MailChannel>,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    pub(crate) registered: tokio::sync::OnceCell<()>,
    pub(crate) limits: limits::EndpointLimits,
    /// Rate-limit permits through the store, shared by every dispatcher (`permits.rs`).
    pub(crate) permits: Arc<permits::StorePermits>,
    pub(crate) breakers: breaker::Breakers,
    /// The broker sinks' circuits, by sink name (`broker.rs`).
    pub(crate) sink_breakers: breaker::Breakers<ConsumerName>,
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

impl Dispatcher {
    /// Start building a dispatcher over `store`.
    pub fn builder(store: Arc<DynStore>) -> DispatcherBuilder {
        DispatcherBuilder::new(store)
    }

    /// Persist the registered consumers so fan-out at enqueue sees them. `run` and
    /// `run_once` call this; call it yourself at start-up when you enqueue before the first
    /// run.
    ///
    /// # Cancel safety
    /// Each consumer is one idempotent write; a dropped call may have written some of them,
    /// and the next call writes them all again.
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

    /// The state of `endpoint`'s circuit in this dispatcher (closed for an endpoint it has
    /// not delivered to). Clones share it.
    pub fn circuit(&self, endpoint: outboxkit_core::ids::EndpointId) -> CircuitState {
        self.shared.breakers.state(&endpoint)
    }

    /// The state of the broker sink `name`'s circuit in this dispatcher (closed for a sink
    /// that has not published, or that is not registered). Clones share it.
    pub fn sink_circuit(&self, name: &str) -> CircuitState {
        ConsumerName::new(name).map_or(CircuitState::Closed, |n| {
            self.shared.sink_breakers.state(&n)
        })
    }

    /// Operator calls (replay, release held, retry now, purge, stats) on this dispatcher's
    /// store and clock.
    pub fn operator(&self) -> Operator {
        Operator::new(self.shared.store.clone(), self.shared.clock.clone())
    }

    /// Run until `shutdown` resolves; then finish in-flight deliveries within the grace
    /// period and release the rest with their attempts refunded. Returns once the
    /// dead-letter alerts the run owes are sent or have failed.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense of "nothing happened": resolve `shutdown` to stop.
    /// Dropping the future aborts the running deliveries without writing their verdicts; their
    /// leases expire and they run again (at-least-once holds, nothing is lost, a request may
    /// be sent twice). Completions already handed to the store are written.
    pub async fn run(&self, shutdown: impl Future<Output = ()> + Send) -> Result<Report> {
        self.register().await?;
        let run = Arc::new(RunState::new(None));
        // The loop runs as a task of the runtime (a worker thread of a multi-thread
        // runtime), not on the caller's thread, which is often `block_on`'s: there every
        // wake-up by the I/O driver would cross threads. The caller's `shutdown` is
        // watched here and passed on.
        let stop = tokio_util::sync::CancellationToken::new();
        let signal = Box::pin(stop.clone().cancelled_owned());
        let mut task = run::Aborting::spawn(RunLoop::new(self, run, Mode::Forever(signal)).drive());
        tokio::pin!(shutdown);
        let report = tokio::select! {
            r = task.join() => r,
            () = &mut shutdown => {
                stop.cancel();
                task.join().await
            }
        };
        self.flush_alerts().await;
        report
    }

    /// Send the dead-letter alerts a run owes before it returns (see [`DeadLetterAlerts`]).
    async fn flush_alerts(&self) {
        if let Some(a) = &self.shared.alerts {
            a.flush().await;
        }
    }

    /// Drain what is due until the soft `budget` is spent: a delivery starts only when its
    /// timeout plus the reservation margin fits in what remains; the rest is released.
    /// Returns once the dead-letter alerts the run owes are sent or have failed (each
    /// bounded by the webhook timeout), so a process may exit right after.
    ///
    /// # Cancel safety
    /// As for [`Dispatcher::run`]: dropping the future abandons running deliveries to their
    /// leases (they run again after the lease), it loses none.
    pub async fn run_once(&self, budget: Duration) -> Result<Report> {
        self.register().await?;
        let deadline = self.shared.clock.now().saturating_add(budget);
        let run = Arc::new(RunState::new(Some(deadline)));
        let once = RunLoop::new(
            self,
            run,
            Mode::<std::pin::Pin<Box<std::future::Ready<()>>>>::Once,
        );
        // On a task of its own, as in `run`.
        let report = run::Aborting::spawn(once.drive()).join().await;
        self.flush_alerts().await;
        report
    }

    /// The deadline of one attempt to `destination`.
    pub(crate) fn deadline_of(&self, destination: &outboxkit_core::model::Destination) -> Duration {
        use outboxkit_core::model::Destination;
        let s = &self.shared;
        match destination {
            // A broker sink's deliveries are handler destinations named after the sink.
            Destination::Handler(c) => match (s.brokers.get(c), s.handlers.get(c)) {
                (Some(sink), _) => sink.sink.deadline(),
                (None, Some(r)) => r.options.timeout,
                (None, None) => s.config.webhook_timeout,
            },
            Destination::Webhook(_) => s.config.webhook_timeout,
            Destination::Email(_) => s.config.mail_deadline(),
        }
    }

    /// The most time any delivery needs reserved before it starts.
    pub(crate) fn max_reservation(&self) -> Duration {
        let s = &self.shared;
        let handler = s.handlers.values().map(|r| r.options.timeout).max();
        let webhook = s.webhooks.is_some().then_some(s.config.webhook_timeout);
        let mail = s.mail.is_some().then_some(s.config.mail_deadline());
        let sink = s.brokers.values().map(|r| r.sink.deadline()).max();
        handler
            .into_iter()
            .chain(webhook)
            .chain(mail)
            .chain(sink)
            .max()
            .unwrap_or_default()
            + s.config.reservation_margin
    }

    /// The least time any delivery needs reserved before it starts.
    pub(crate) fn min_reservation(&self) -> Duration {
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

    /// What one claim asks for: at most `size` deliveries of the consumers, sinks, endpoints
    /// and mail this run serves now. Only a `wide` claim asks for webhooks and e-mail: a claim
    /// started while a wide one is in flight does not know what that one will bring back
    /// (`held` is what the run holds, and the per-endpoint caps and the mailer's rate count
    /// it), so it takes handler and sink deliveries only.
    pub(crate) fn claim_request(
        &self,
        run: &RunState,
        size: usize,
        now: Timestamp,
        held: HashMap<EndpointId, usize>,
        wide: bool,
    ) -> Option<ClaimRequest> {
        let s = &self.shared;
        let size = u32::try_from(size)
            .unwrap_or(u32::MAX)
            .min(s.config.batch_size);
        let mut req = ClaimRequest::new(size, s.config.lease)
            .dormant_topics(s.config.dormant_topics.iter().cloned());
        let mut any = false;
        // A paused consumer is left out (its pending deliveries wait in the store).
        for (name, reg) in &s.handlers {
            if run.tripped_until(name, now).is_none()
                && reg.semaphore.available_permits() > 0
                && !run.paused.is_paused(name)
            {
                req = req.handler(name.clone(), reg.options.retry.max_attempts());
                any = true;
            }
        }
        // Sinks with an open circuit (their broker is unreachable) stay where they are.
        let mut blocked_sinks = std::collections::BTreeSet::new();
        s.sink_breakers.blocked(now, &mut blocked_sinks);
        for (name, reg) in &s.brokers {
            if reg.semaphore.available_permits() > 0
                && !blocked_sinks.contains(name)
                && !run.paused.is_paused(name)
            {
                req = req.handler(name.clone(), reg.sink.retry_budget());
                any = true;
            }
        }
        if let Some(w) = s.webhooks.as_ref().filter(|_| wide) {
            // Endpoints with an open circuit stay where they are; no endpoint gets more than
            // its cap lets start: its cap less what this run holds for it (claimed, not yet
            // finished) or what is in flight to it, whichever is more.
            let mut skip = std::collections::BTreeSet::new();
            s.breakers.blocked(now, &mut skip);
            let mut held = held;
            s.limits.in_flight(&mut held);
            let room = |e: EndpointId, n: usize| {
                let free = s.config.concurrency_for(e).saturating_sub(n);
                u32::try_from(free).unwrap_or(u32::MAX)
            };
            for e in s.config.endpoint_concurrency_overrides.keys() {
                held.entry(*e).or_default();
            }
            let limit = u32::try_from(s.config.default_endpoint_concurrency()).unwrap_or(u32::MAX);
            req = req.webhooks(w.claim_budget).endpoint_limit(limit.max(1));
            for (e, n) in held {
                req = req.endpoint_room(e, room(e, n));
            }
            req = req.exclude_endpoints(skip);
            any = true;
        }
        if let Some(m) = s.mail.as_ref().filter(|_| wide) {
            if m.mailer.available() {
                req = req.email(m.claim_budget);
                any = true;
            }
        }
        any.then_some(req)
    }
}
