//! The broker channel: a [`BrokerSink`] registered under a consumer name publishes the
//! messages its topic filter matches to a broker (NATS JetStream, RabbitMQ) through a
//! [`BrokerTransport`](outboxkit_core::broker::BrokerTransport).
//!
//! In storage a sink is an ordinary consumer: fan-out at enqueue creates one consumer
//! delivery per matching message, the claim serves it by consumer name, and per-key
//! ordering, leases, retries, held deliveries and the ledger work unchanged. Only the
//! dispatcher knows that this consumer's deliveries go to a broker instead of a handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::attempt::{completed, context, gate, record, verdict_policy, Done, Gate, RunState};
use super::breaker::{CircuitState, Pass, Signal, Transition};
use super::{DispatcherBuilder, Shared};
use outboxkit_core::broker::{
    broker_headers, BrokerFailure, BrokerMessage, BrokerResponse, DynBrokerTransport,
    SubjectTemplate,
};
use outboxkit_core::claim::Lease;
use outboxkit_core::endpoint::{BodyFormat, Consumer};
use outboxkit_core::error::{Error, Result};
use outboxkit_core::ids::{ConsumerName, TopicFilter};
use outboxkit_core::model::{Delivery, DeliveryStatus, Envelope, Message};
use outboxkit_core::retry::RetryPolicy;
use outboxkit_core::store::{DeliveryFilter, PageRequest};
use outboxkit_core::time::Timestamp;
use outboxkit_core::verdict::classify;

/// Where and how a broker sink publishes. Build with [`BrokerSink::new`]; the defaults are
/// the envelope body, a 10 s deadline per publish, the webhook retry schedule (1 m, 5 m,
/// 30 m, 2 h, 12 h) and 64 publishes in flight.
#[derive(Clone, Debug)]
pub struct BrokerSink {
    transport: Arc<DynBrokerTransport>,
    subject: SubjectTemplate,
    body: BodyFormat,
    timeout: Duration,
    retry: RetryPolicy,
    concurrency: usize,
}

impl BrokerSink {
    /// Publish through `transport` to the subject (NATS) or routing key (AMQP) `subject`, a
    /// template with `{topic}` and optionally `{tenant}` (e.g. `events.{topic}`).
    pub fn new(transport: Arc<DynBrokerTransport>, subject: &str) -> Result<Self> {
        let subject = SubjectTemplate::parse(subject)
            .map_err(|e| Error::misconfigured("broker.subject", e.message().to_owned()))?;
        Ok(BrokerSink {
            transport,
            subject,
            body: BodyFormat::Envelope,
            timeout: Duration::from_secs(10),
            retry: RetryPolicy::webhook_default(),
            concurrency: 64,
        })
    }

    /// Send the envelope `{"type","timestamp","data"}` (default) or the raw payload.
    pub fn body(mut self, body: BodyFormat) -> Self {
        self.body = body;
        self
    }

    /// The deadline of one publish and its acknowledgement (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The retry policy (default: the webhook schedule).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// How many publishes of this sink may wait for their acknowledgement at once
    /// (default 64).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The deadline of one publish.
    pub(crate) fn deadline(&self) -> Duration {
        self.timeout
    }

    /// The attempts a claim may spend on this sink's deliveries.
    pub(crate) fn retry_budget(&self) -> u32 {
        self.retry.max_attempts()
    }

    /// The subject template.
    pub fn subject(&self) -> &SubjectTemplate {
        &self.subject
    }

    /// The message as this sink publishes it on one attempt.
    pub fn render(&self, message: &Message) -> BrokerMessage {
        let body = match self.body {
            BodyFormat::Envelope => Envelope::of(message).to_bytes(),
            BodyFormat::Raw => message.payload.clone(),
        };
        let mut headers = broker_headers(message);
        if self.body == BodyFormat::Envelope {
            headers.push(("content-type".to_owned(), "application/json".to_owned()));
        }
        BrokerMessage {
            subject: self.subject.render(message),
            dedup_id: message.id.to_string(),
            headers,
            body,
            timeout: self.timeout,
        }
    }
}

/// A sink as the dispatcher runs it.
pub(crate) struct RegisteredSink {
    pub(crate) consumer: Consumer,
    pub(crate) sink: BrokerSink,
    pub(crate) semaphore: Arc<Semaphore>,
}

impl DispatcherBuilder {
    /// Publish the messages whose topic `filter` matches to a broker, as the consumer
    /// `name` (a name no handler uses). See [`BrokerSink`].
    pub fn broker(mut self, name: &str, filter: &str, sink: BrokerSink) -> Self {
        self.brokers
            .push((name.to_owned(), filter.to_owned(), sink));
        self
    }
}

/// Check the sinks given to the builder.
pub(crate) fn build_sinks(
    pending: Vec<(String, String, BrokerSink)>,
    lease: Duration,
    now: Timestamp,
) -> Result<BTreeMap<ConsumerName, RegisteredSink>> {
    let mut out = BTreeMap::new();
    for (name, filter, sink) in pending {
        let name = ConsumerName::new(name)
            .map_err(|e| Error::misconfigured("broker", e.message().to_owned()))?;
        let filter = TopicFilter::parse(&filter)
            .map_err(|e| Error::misconfigured("broker.filter", e.message().to_owned()))?;
        if sink.timeout.is_zero() || sink.timeout >= lease {
            return Err(Error::misconfigured(
                "broker.timeout",
                "must be above zero and shorter than the lease",
            ));
        }
        if !(1..=10_000).contains(&sink.concurrency) {
            return Err(Error::misconfigured(
                "broker.concurrency",
                "must be from 1 to 10000",
            ));
        }
        let reg = RegisteredSink {
            consumer: Consumer {
                name: name.clone(),
                filter,
                created_at: now,
                status: outboxkit_core::ConsumerStatus::Active,
            },
            semaphore: Arc::new(Semaphore::new(sink.concurrency)),
            sink,
        };
        if out.insert(name, reg).is_some() {
            return Err(Error::misconfigured(
                "broker",
                "two broker sinks are registered under one consumer name",
            ));
        }
    }
    Ok(out)
}

/// Persist the sinks as consumers, then make their `held` deliveries due now: a sink's
/// configuration lives in the process that registers it, so a (re)start is when it may
/// have changed, and each held delivery is tried once more against it. The release is best
/// effort: a failure is logged and the held deliveries wait for their next probe.
pub(crate) async fn register_sinks(shared: &Shared) -> Result<()> {
    for reg in shared.brokers.values() {
        shared.store.put_consumer(&reg.consumer).await?;
    }
    if !shared.brokers.is_empty() {
        if let Err(e) = release_held(shared).await {
            tracing::warn!(error = %e, "releasing the broker sinks' held deliveries failed");
        }
    }
    Ok(())
}

async fn release_held(shared: &Shared) -> Result<()> {
    // A paused sink's deliveries stay held until it is resumed.
    let paused: Vec<ConsumerName> = shared
        .store
        .list_consumers()
        .await?
        .into_iter()
        .filter(|c| c.status == outboxkit_core::ConsumerStatus::Paused)
        .map(|c| c.name)
        .collect();
    for tenant in shared.store.tenants().await? {
        for name in shared.brokers.keys().filter(|n| !paused.contains(n)) {
            let filter = DeliveryFilter {
                status: Some(DeliveryStatus::Held),
                consumer: Some(name.clone()),
                ..DeliveryFilter::default()
            };
            let mut page = PageRequest::first(500);
            loop {
                let got = shared
                    .store
                    .list_deliveries(&tenant.tenant, &filter, page)
                    .await?;
                for d in &got.items {
                    // A race with a claim is harmless: the delivery is then being tried.
                    let _ = shared.store.retry_now(&tenant.tenant, d.id).await;
                }
                match got.next {
                    Some(cursor) => page.cursor = Some(cursor),
                    None => break,
                }
            }
        }
    }
    Ok(())
}

/// One publish, start to verdict.
pub(crate) async fn broker_path(
    shared: &Shared,
    run: &RunState,
    lease: Lease,
    delivery: &Delivery,
    message: &Message,
    consumer: &ConsumerName,
) -> Done {
    let Some(reg) = shared.brokers.get(consumer) else {
        return Done::release(lease, shared.config.poll_interval);
    };
    let permit = tokio::select! {
        p = reg.semaphore.clone().acquire_owned() => p.ok(),
        () = run.stopping.cancelled() => None,
    };
    let Some(_permit) = permit else {
        return Done::release_now(lease);
    };
    if let Gate::Release(delay) = gate(shared, run, reg.sink.timeout, None) {
        return Done::release(lease, delay);
    }
    // An open circuit (the broker is unreachable): back without spending an attempt, due
    // when the next probe may go. One probe at a time, as for an endpoint.
    let breakers = &shared.sink_breakers;
    let probe = match breakers.pass(consumer, shared.clock.now(), shared.config.poll_interval) {
        Pass::Go { probe } => probe,
        Pass::Wait(delay) => return Done::release(lease, delay),
    };
    let started = shared.clock.now();
    let response = reg.sink.transport.publish(reg.sink.render(message)).await;
    let finished = shared.clock.now();
    let outcome = outboxkit_core::Outcome::from(&response);
    let transition = breakers.record(consumer.clone(), Signal::of(&outcome), probe, finished);
    if let Some(t) = transition {
        circuit_changed(consumer, &t);
    }
    if matches!(
        response,
        BrokerResponse::Failed {
            failure: BrokerFailure::Connection,
            ..
        }
    ) {
        // No connection to the broker: the message did not get there (a publish cut off
        // mid-way may have; the retry carries the same de-duplication id). Not the
        // message's fault, so no attempt is spent: back, due when the circuit lets the next
        // probe go.
        let delay = match breakers.state(consumer) {
            CircuitState::Open { until } => until.duration_since(finished),
            _ => shared.config.breaker_cooldown,
        };
        return Done::release(lease, delay);
    }
    let policy = verdict_policy(shared, reg.sink.retry.clone(), false);
    let verdict = classify(&outcome, &context(shared, &lease), &policy);
    completed(
        lease,
        verdict,
        record(&outcome, started, finished, response.excerpt()),
        delivery,
        started,
        finished,
    )
}

/// Log a change of a sink's circuit.
fn circuit_changed(sink: &ConsumerName, t: &Transition<ConsumerName>) {
    match t.state {
        CircuitState::Open { until } => tracing::warn!(
            sink = %sink,
            failures = t.failures,
            until = %until,
            "the broker sink's circuit opened: the broker is unavailable; its deliveries wait without spending attempts"
        ),
        CircuitState::Closed => {
            tracing::info!(sink = %sink, "the broker sink's circuit closed: the broker is back")
        }
        CircuitState::HalfOpen => {}
    }
}
