//! The broker channel's port: [`BrokerTransport`] publishes one message to a message broker
//! (NATS JetStream, RabbitMQ) and reports whether the broker acknowledged it.
//!
//! A broker *sink* is stored as an ordinary consumer destination: its consumer name is the
//! sink's name, so every store persists, fans out and claims broker deliveries without
//! knowing about brokers. What the sink publishes is decided here, purely: the subject (or
//! routing key) from a [`SubjectTemplate`], the headers from [`broker_headers`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::model::{ErrorClass, Message};

/// The header carrying the message id (also sent as the broker's de-duplication id).
pub const HEADER_MESSAGE_ID: &str = "outbox-message-id";
/// The header carrying the topic.
pub const HEADER_TOPIC: &str = "outbox-topic";
/// The header carrying the tenant.
pub const HEADER_TENANT: &str = "outbox-tenant";
/// The header carrying the cause (`handler/message-id/depth`), when there is one.
pub const HEADER_CAUSE: &str = "outbox-cause";
/// The W3C trace context header, copied from the message's headers when present.
pub const HEADER_TRACEPARENT: &str = "traceparent";

/// One message to publish.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerMessage {
    /// The NATS subject or the AMQP routing key.
    pub subject: String,
    /// The broker's de-duplication id: the message id, identical across retries
    /// (`Nats-Msg-Id`, AMQP `message-id`).
    pub dedup_id: String,
    /// Headers ([`broker_headers`]).
    pub headers: Vec<(String, String)>,
    /// The body: the envelope or the raw payload.
    pub body: Vec<u8>,
    /// The deadline for the publish and its acknowledgement.
    pub timeout: Duration,
}

impl BrokerMessage {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for BrokerMessage {
    // No body in debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerMessage")
            .field("subject", &self.subject)
            .field("dedup_id", &self.dedup_id)
            .field("body_len", &self.body.len())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a publish was not acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BrokerFailure {
    /// No acknowledgement within the deadline (it may have been stored: the retry carries
    /// the same de-duplication id).
    Timeout,
    /// The connection is down or was lost during the publish.
    Connection,
    /// The broker answered but cannot take it now: no responders, the stream has no
    /// leader, a negative confirm (`basic.nack`).
    Unavailable,
    /// Nothing takes the subject: no stream listens on it (JetStream), or the message was
    /// returned unroutable (`mandatory`) or the exchange does not exist (AMQP).
    NoRoute,
    /// The broker refused our credentials the right to publish there.
    PermissionDenied,
    /// The broker refused this message itself (e.g. larger than its maximum payload).
    Rejected,
}

impl BrokerFailure {
    /// The ledger's class for it.
    pub fn class(self) -> ErrorClass {
        match self {
            BrokerFailure::Timeout => ErrorClass::Timeout,
            BrokerFailure::Connection => ErrorClass::Network,
            BrokerFailure::Unavailable => ErrorClass::BrokerUnavailable,
            BrokerFailure::NoRoute => ErrorClass::BrokerNoRoute,
            BrokerFailure::PermissionDenied => ErrorClass::BrokerDenied,
            BrokerFailure::Rejected => ErrorClass::BrokerRejected,
        }
    }
}

/// What came back from one publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrokerResponse {
    /// The broker acknowledged it (JetStream `PubAck`, AMQP confirm).
    Acknowledged {
        /// The broker recognised the de-duplication id and did not store it again.
        duplicate: bool,
    },
    /// Not acknowledged.
    Failed {
        /// Why.
        failure: BrokerFailure,
        /// A short description (no address, no secret, no payload).
        detail: String,
    },
}

impl BrokerResponse {
    /// A failure with its detail.
    pub fn failed(failure: BrokerFailure, detail: impl fmt::Display) -> Self {
        BrokerResponse::Failed {
            failure,
            detail: crate::model::excerpt(&detail.to_string()),
        }
    }

    /// The failure, `None` for an acknowledgement (the classification input is
    /// `Outcome::Broker(response.failure().map_or(Ok(()), Err))`, or `Outcome::from(&response)`).
    pub fn failure(&self) -> Option<BrokerFailure> {
        match self {
            BrokerResponse::Acknowledged { .. } => None,
            BrokerResponse::Failed { failure, .. } => Some(*failure),
        }
    }

    /// The text kept in the ledger.
    pub fn excerpt(&self) -> &str {
        match self {
            BrokerResponse::Acknowledged { duplicate: true } => "acknowledged as a duplicate",
            BrokerResponse::Acknowledged { duplicate: false } => "",
            BrokerResponse::Failed { detail, .. } => detail,
        }
    }
}

/// Publishes messages to a broker.
///
/// # Contract
/// - `publish` MUST report [`BrokerResponse::Acknowledged`] only once the broker has
///   acknowledged the message (JetStream `PubAck`, an AMQP publisher confirm).
/// - `publish` MUST send [`BrokerMessage::dedup_id`] as the broker's de-duplication id.
/// - `publish` MUST return within `message.timeout` (plus scheduling slack), reporting a
///   stall as [`BrokerFailure::Timeout`].
/// - `publish` SHOULD reconnect by itself after the broker comes back: a lost connection is
///   a [`BrokerFailure::Connection`] for this publish, never a dead transport.
#[async_trait]
pub trait BrokerTransport: Send + Sync + fmt::Debug + 'static {
    /// Publish one message and wait for its acknowledgement.
    async fn publish(&self, message: BrokerMessage) -> BrokerResponse;
}

/// A shared [`BrokerTransport`].
pub type DynBrokerTransport = dyn BrokerTransport;

#[async_trait]
impl<T: BrokerTransport + ?Sized> BrokerTransport for std::sync::Arc<T> {
    async fn publish(&self, message: BrokerMessage) -> BrokerResponse {
        (**self).publish(message).await
    }
}

#[async_trait]
impl<T: BrokerTransport + ?Sized> BrokerTransport for Box<T> {
    async fn publish(&self, message: BrokerMessage) -> BrokerResponse {
        (**self).publish(message).await
    }
}

/// How a subject (NATS) or routing key (AMQP) is made from a message: literal text with the
/// placeholders `{topic}` and `{tenant}`. `events.{topic}` sends `order.created` to
/// `events.order.created`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubjectTemplate {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Topic,
    Tenant,
}

impl SubjectTemplate {
    /// Parse a template. It must name `{topic}` (otherwise every topic lands on one subject
    /// and the consumer cannot tell them apart by subject), hold no other placeholder and no
    /// whitespace, and be at most 200 bytes.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| Error::invalid_input("subject", why.to_owned());
        if text.is_empty() || text.len() > 200 {
            return Err(bad("must be 1 to 200 bytes"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("must not contain whitespace"));
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if rest[..open].contains('}') {
                return Err(bad("has a '}' without '{'"));
            }
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let Some(close) = rest[open..].find('}') else {
                return Err(bad("has an unclosed '{'"));
            };
            parts.push(match &rest[open + 1..open + close] {
                "topic" => Part::Topic,
                "tenant" => Part::Tenant,
                _ => return Err(bad("knows only the placeholders {topic} and {tenant}")),
            });
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(bad("has a '}' without '{'"));
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        if !parts.contains(&Part::Topic) {
            return Err(bad("must contain {topic}"));
        }
        Ok(SubjectTemplate { parts })
    }

    /// The subject for `message`.
    pub fn render(&self, message: &Message) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Topic => out.push_str(message.topic.as_str()),
                Part::Tenant => out.push_str(message.tenant.as_str()),
            }
        }
        out
    }
}

impl fmt::Display for SubjectTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.parts {
            match p {
                Part::Text(t) => f.write_str(t)?,
                Part::Topic => f.write_str("{topic}")?,
                Part::Tenant => f.write_str("{tenant}")?,
            }
        }
        Ok(())
    }
}

/// The headers every broker publish carries: the message id, topic, tenant, cause (when
/// the message was emitted by a handler) and `traceparent` (when the message has one).
pub fn broker_headers(message: &Message) -> Vec<(String, String)> {
    let mut h = vec![
        (HEADER_MESSAGE_ID.to_owned(), message.id.to_string()),
        (HEADER_TOPIC.to_owned(), message.topic.to_string()),
        (HEADER_TENANT.to_owned(), message.tenant.to_string()),
    ];
    if let Some(c) = &message.cause {
        h.push((
            HEADER_CAUSE.to_owned(),
            format!("{}/{}/{}", c.handler, c.message_id, c.depth),
        ));
    }
    if let Some(tp) = message.headers.get(HEADER_TRACEPARENT) {
        h.push((HEADER_TRACEPARENT.to_owned(), tp.clone()));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ConsumerName, MessageId, TenantId, Topic};
    use crate::model::Cause;
    use crate::time::Timestamp;

    fn message() -> Message {
        let now = Timestamp::from_unix_millis(1_700_000_000_000).unwrap();
        Message {
            id: MessageId::parse("0190b2a0-0000-7000-8000-000000000001").unwrap(),
            topic: Topic::new("order.created").unwrap(),
            payload: b"{}".to_vec(),
            tenant: TenantId::new("acme").unwrap(),
            ordering_key: None,
            idempotency_key: None,
            available_at: now,
            headers: [("traceparent".to_owned(), "00-abc-def-01".to_owned())].into(),
            cause: None,
            created_at: now,
        }
    }

    #[test]
    fn templates_table() {
        let m = message();
        let rows = [
            ("{topic}", Some("order.created")),
            ("events.{topic}", Some("events.order.created")),
            ("{tenant}.{topic}", Some("acme.order.created")),
            ("x.{tenant}.{topic}.y", Some("x.acme.order.created.y")),
            ("events", None),
            ("{tenant}", None),
            ("events.{id}", None),
            ("events.{topic", None),
            ("events}.{topic}", None),
            ("a b.{topic}", None),
            ("", None),
        ];
        for (text, want) in rows {
            let got = SubjectTemplate::parse(text).map(|t| t.render(&m)).ok();
            assert_eq!(got.as_deref(), want, "{text}");
            if let Ok(t) = SubjectTemplate::parse(text) {
                assert_eq!(t.to_string(), text, "round trip");
            }
        }
    }

    #[test]
    fn headers_carry_id_topic_tenant_cause_and_trace() {
        let mut m = message();
        let h = broker_headers(&m);
        let get = |h: &[(String, String)], k: &str| {
            h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(get(&h, HEADER_MESSAGE_ID), Some(m.id.to_string()));
        assert_eq!(get(&h, HEADER_TOPIC).as_deref(), Some("order.created"));
        assert_eq!(get(&h, HEADER_TENANT).as_deref(), Some("acme"));
        assert_eq!(
            get(&h, HEADER_TRACEPARENT).as_deref(),
            Some("00-abc-def-01")
        );
        assert_eq!(get(&h, HEADER_CAUSE), None);
        m.cause = Some(Cause {
            handler: ConsumerName::new("billing").unwrap(),
            message_id: m.id,
            topic: m.topic.clone(),
            depth: 2,
        });
        let h = broker_headers(&m);
        assert_eq!(get(&h, HEADER_CAUSE), Some(format!("billing/{}/2", m.id)));
    }

    #[test]
    fn failures_have_ledger_classes() {
        let rows = [
            (BrokerFailure::Timeout, "timeout"),
            (BrokerFailure::Connection, "network"),
            (BrokerFailure::Unavailable, "broker-unavailable"),
            (BrokerFailure::NoRoute, "broker-no-route"),
            (BrokerFailure::PermissionDenied, "broker-denied"),
            (BrokerFailure::Rejected, "broker-rejected"),
        ];
        for (f, name) in rows {
            assert_eq!(f.class().as_str(), name);
            assert_eq!(ErrorClass::parse(name).unwrap(), f.class());
        }
    }

    /// The broker rows of the verdict table (`crate::verdict::classify`), one per row,
    /// on the webhook schedule: attempt 1 retries after 60 s, a held delivery is probed
    /// after 1 h.
    mod verdicts {
        use std::time::Duration;

        use super::BrokerFailure as B;
        use crate::model::{AttemptOutcome, DeadReason, ErrorClass};
        use crate::retry::RetryPolicy;
        use crate::time::Timestamp;
        use crate::verdict::{classify, AttemptContext, Outcome, Verdict, VerdictPolicy};

        fn at(secs: u64) -> Timestamp {
            Timestamp::from_unix_millis(1_700_000_000_000)
                .unwrap()
                .saturating_add(Duration::from_secs(secs))
        }

        fn ctx(attempt: u32, probe: bool) -> AttemptContext {
            AttemptContext {
                attempt,
                snoozes: 0,
                probe,
                now: at(0),
                jitter: 0.5,
            }
        }

        fn broker(f: B) -> Outcome {
            Outcome::Broker(Err(f))
        }

        fn retry(secs: u64) -> Verdict {
            Verdict::Retry { at: at(secs) }
        }

        fn dead(reason: DeadReason) -> Verdict {
            Verdict::Dead { reason }
        }

        #[test]
        fn broker_rows() {
            let policy = VerdictPolicy::new(RetryPolicy::webhook_default());
            let held = Verdict::Held { probe_at: at(3600) };
            let rows: Vec<(&str, Outcome, u32, Verdict)> = vec![
                ("broker ack", Outcome::Broker(Ok(())), 1, Verdict::Succeeded),
                ("broker timeout retried", broker(B::Timeout), 1, retry(60)),
                (
                    "broker connection retried",
                    broker(B::Connection),
                    2,
                    retry(300),
                ),
                (
                    "broker unavailable retried",
                    broker(B::Unavailable),
                    3,
                    retry(1800),
                ),
                ("broker no route held", broker(B::NoRoute), 1, held.clone()),
                (
                    "broker denied held",
                    broker(B::PermissionDenied),
                    1,
                    held.clone(),
                ),
                (
                    "broker rejected dead",
                    broker(B::Rejected),
                    1,
                    dead(DeadReason::Permanent),
                ),
                (
                    "budget spent broker timeout",
                    broker(B::Timeout),
                    6,
                    dead(DeadReason::MaxAttempts),
                ),
            ];
            for (name, outcome, attempt, want) in rows {
                assert_eq!(
                    classify(&outcome, &ctx(attempt, false), &policy),
                    want,
                    "{name}"
                );
            }
        }

        /// Probes of a held delivery (attempt 3 spent).
        #[test]
        fn broker_probes() {
            let policy = || VerdictPolicy::new(RetryPolicy::webhook_default());
            let c = ctx(3, true);
            // Broker probes: an ack releases, a refusal of the configuration stays held, an
            // outage returns to the schedule.
            let rows = [
                (Outcome::Broker(Ok(())), Verdict::Succeeded),
                (broker(B::NoRoute), Verdict::Held { probe_at: at(3600) }),
                (
                    broker(B::PermissionDenied),
                    Verdict::Held { probe_at: at(3600) },
                ),
                (broker(B::Timeout), retry(30 * 60)),
                (broker(B::Rejected), dead(DeadReason::Permanent)),
            ];
            for (o, want) in rows {
                assert_eq!(classify(&o, &c, &policy()), want, "{o:?}");
            }
        }

        #[test]
        fn broker_ledger_outcomes() {
            use AttemptOutcome::{Failed, Succeeded};
            let rows = [
                (Outcome::Broker(Ok(())), Some(Succeeded)),
                (broker(B::NoRoute), Some(Failed(ErrorClass::BrokerNoRoute))),
                (broker(B::Connection), Some(Failed(ErrorClass::Network))),
            ];
            for (o, want) in rows {
                assert_eq!(o.attempt_outcome(), want, "{o:?}");
            }
        }
    }
}
