//! [`DispatcherBuilder`]: registers handlers and channels, validates everything once.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::alerts::{Alerter, DeadLetterAlerts};
use super::dedup::DedupCache;
use super::handler::{Handler, HandlerOptions};
use super::report::Observer;
use super::{
    Dispatcher, DispatcherConfig, LiteralRecipients, MailChannel, MailComposer, PayloadComposer,
    RecipientResolver, Registered, Shared, WebhookChannel,
};
use crate::timer::DynTimer;
use outboxkit_core::endpoint::Consumer;
use outboxkit_core::error::{Error, Result};
use outboxkit_core::ids::{ConsumerName, TopicFilter};
use outboxkit_core::mail::DynMailer;
use outboxkit_core::retry::{RetryPolicy, TenantPolicy};
use outboxkit_core::signing::HeaderNames;
use outboxkit_core::store::DynStore;
use outboxkit_core::system::{OsEntropy, SystemClock};
use outboxkit_core::time::DynEntropy;
use outboxkit_core::transport::DynWebhookTransport;
use outboxkit_core::vault::DynSecretVault;

type PendingHandler = (String, String, Arc<dyn Handler>, HandlerOptions);

/// Builds a [`Dispatcher`]. Every setting is checked in [`DispatcherBuilder::build`]; bad
/// configuration is an error, never a panic.
pub struct DispatcherBuilder {
    store: Arc<DynStore>,
    clock: Option<Arc<DynTimer>>,
    entropy: Option<Arc<DynEntropy>>,
    config: DispatcherConfig,
    handlers: Vec<PendingHandler>,
    transport: Option<Arc<DynWebhookTransport>>,
    vault: Option<Arc<DynSecretVault>>,
    webhook_policy: TenantPolicy,
    mailer: Option<Arc<DynMailer>>,
    mail_policy: TenantPolicy,
    resolver: Arc<dyn RecipientResolver>,
    composer: Arc<dyn MailComposer>,
    observer: Option<Arc<dyn Observer>>,
    alerts: Option<DeadLetterAlerts>,
    /// Broker sinks: name, filter, sink (`broker.rs`).
    pub(crate) brokers: Vec<(String, String, super::BrokerSink)>,
}

impl std::fmt::Debug for DispatcherBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatcherBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DispatcherBuilder {
    pub(crate) fn new(store: Arc<DynStore>) -> Self {
        DispatcherBuilder {
            store,
            clock: None,
            entropy: None,
            config: DispatcherConfig::default(),
            handlers: Vec::new(),
            transport: None,
            vault: None,
            webhook_policy: TenantPolicy::uniform(RetryPolicy::webhook_default()),
            mailer: None,
            mail_policy: TenantPolicy::uniform(RetryPolicy::handler_default()),
            resolver: Arc::new(LiteralRecipients),
            composer: Arc::new(PayloadComposer),
            observer: None,
            alerts: None,
            brokers: Vec::new(),
        }
    }

    /// The configuration (default: [`DispatcherConfig::default`]).
    pub fn config(mut self, config: DispatcherConfig) -> Self {
        self.config = config;
        self
    }

    /// The clock (default: [`SystemClock`]). Use the same clock as the store.
    pub fn clock(mut self, clock: Arc<DynTimer>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The random source for jitter (default: [`OsEntropy`]).
    pub fn entropy(mut self, entropy: Arc<DynEntropy>) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Register a handler as the consumer `name` for the topics `filter` matches (`*`,
    /// `order.created`, `order.*`, or a comma-separated list), with default options.
    pub fn handler(self, name: &str, filter: &str, handler: impl Handler) -> Self {
        self.handler_with(name, filter, handler, HandlerOptions::default())
    }

    /// Register a handler with options (retry policy, timeout, concurrency, dedup).
    pub fn handler_with(
        mut self,
        name: &str,
        filter: &str,
        handler: impl Handler,
        options: HandlerOptions,
    ) -> Self {
        self.handlers.push((
            name.to_owned(),
            filter.to_owned(),
            Arc::new(handler),
            options,
        ));
        self
    }

    /// Deliver webhooks through `transport`, opening endpoint secrets with `vault`.
    pub fn webhooks(
        mut self,
        transport: Arc<DynWebhookTransport>,
        vault: Arc<DynSecretVault>,
    ) -> Self {
        self.transport = Some(transport);
        self.vault = Some(vault);
        self
    }

    /// The webhook retry policy (default: 1 m, 5 m, 30 m, 2 h, 12 h), with optional
    /// per-tenant overrides.
    pub fn webhook_policy(mut self, policy: TenantPolicy) -> Self {
        self.webhook_policy = policy;
        self
    }

    /// Deliver e-mail through `mailer`.
    pub fn mailer(mut self, mailer: Arc<DynMailer>) -> Self {
        self.mailer = Some(mailer);
        self
    }

    /// The e-mail retry policy (default: exponential from 1 m, 8 attempts).
    pub fn mail_policy(mut self, policy: TenantPolicy) -> Self {
        self.mail_policy = policy;
        self
    }

    /// Resolve e-mail recipients at send time (default: the recipient is the address).
    pub fn recipient_resolver(mut self, resolver: Arc<dyn RecipientResolver>) -> Self {
        self.resolver = resolver;
        self
    }

    /// Compose e-mails from messages (default: [`PayloadComposer`]).
    pub fn mail_composer(mut self, composer: Arc<dyn MailComposer>) -> Self {
        self.composer = composer;
        self
    }

    /// A metrics hook.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Alert the operator when deliveries go dead (a webhook and/or an e-mail, at most once
    /// per `min_interval`); best effort, never in the way of a completion.
    pub fn dead_letter_alerts(mut self, alerts: DeadLetterAlerts) -> Self {
        self.alerts = Some(alerts);
        self
    }

    /// Check everything and build.
    pub fn build(self) -> Result<Dispatcher> {
        self.config.validate()?;
        let names = HeaderNames::with_prefix(&self.config.header_prefix)?;
        let clock: Arc<DynTimer> = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let entropy: Arc<DynEntropy> = self.entropy.unwrap_or_else(|| Arc::new(OsEntropy));
        let now = clock.now();
        let mut handlers = BTreeMap::new();
        for (name, filter, handler, options) in self.handlers {
            let name = ConsumerName::new(name)
                .map_err(|e| Error::misconfigured("handler", e.message().to_owned()))?;
            let filter = TopicFilter::parse(&filter)
                .map_err(|e| Error::misconfigured("handler.filter", e.message().to_owned()))?;
            if options.timeout.is_zero() || options.timeout >= self.config.lease {
                return Err(Error::misconfigured(
                    "handler.timeout",
                    "must be above zero and shorter than the lease",
                ));
            }
            let permits = options
                .concurrency
                .unwrap_or(self.config.handler_concurrency);
            if !(1..=10_000).contains(&permits) {
                return Err(Error::misconfigured(
                    "handler.concurrency",
                    "must be from 1 to 10000",
                ));
            }
            let reg = Registered {
                consumer: Consumer {
                    name: name.clone(),
                    filter,
                    created_at: now,
                    status: outboxkit_core::ConsumerStatus::Active,
                },
                handler,
                options,
                semaphore: Arc::new(tokio::sync::Semaphore::new(permits)),
                dedup: std::sync::Mutex::new(DedupCache::default()),
            };
            if handlers.insert(name, reg).is_some() {
                return Err(Error::misconfigured(
                    "handler",
                    "two handlers are registered under one consumer name",
                ));
            }
        }
        let webhooks = match (self.transport, self.vault) {
            (Some(transport), Some(vault)) => Some(WebhookChannel {
                transport,
                vault,
                claim_budget: self.webhook_policy.claim_budget(),
                policy: self.webhook_policy,
                keys: Default::default(),
            }),
            _ => None,
        };
        let mail = self.mailer.map(|mailer| MailChannel {
            mailer,
            claim_budget: self.mail_policy.claim_budget(),
            policy: self.mail_policy,
            resolver: self.resolver,
            composer: self.composer,
        });
        let alerts = match self.alerts {
            Some(a) => {
                a.validate()?;
                Some(Arc::new(Alerter::new(
                    a,
                    clock.clone(),
                    entropy.clone(),
                    names.clone(),
                    self.config.mail_key_prefix.clone(),
                    self.config.webhook_timeout,
                )))
            }
            None => None,
        };
        let brokers = super::broker::build_sinks(self.brokers, self.config.lease, now)?;
        if brokers.keys().any(|b| handlers.contains_key(b)) {
            return Err(Error::misconfigured(
                "broker",
                "a broker sink and a handler share one consumer name",
            ));
        }
        if handlers.is_empty() && webhooks.is_none() && mail.is_none() && brokers.is_empty() {
            return Err(Error::misconfigured(
                "dispatcher",
                "register at least one handler, webhooks, a mailer or a broker sink",
            ));
        }
        let settings =
            self.config
                .breaker_threshold
                .map(|threshold| super::breaker::BreakerSettings {
                    threshold,
                    cooldown: self.config.breaker_cooldown,
                    max_cooldown: self.config.breaker_max_cooldown,
                });
        let breakers = super::breaker::Breakers::new(settings);
        // The broker sinks' circuits work as the endpoints' do, with the same settings.
        let sink_breakers = super::breaker::Breakers::new(settings);
        Ok(Dispatcher {
            shared: Arc::new(Shared {
                store: self.store,
                clock,
                jitter: super::jitter::Samples::new(entropy),
                config: self.config,
                names,
                handlers,
                webhooks,
                mail,
                observer: self.observer,
                registered: tokio::sync::OnceCell::new(),
                limits: super::limits::EndpointLimits::default(),
                permits: Arc::default(),
                breakers,
                sink_breakers,
                alerts,
                brokers,
            }),
        })
    }
}
