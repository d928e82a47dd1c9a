//! The domain model of DESIGN §3: messages, destinations, deliveries, attempts.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{
    ConsumerName, DeliveryId, EndpointId, IdempotencyKey, MessageId, OrderingKey, Recipient,
    TenantId, Topic,
};
use crate::time::Timestamp;

/// Limits applied to every enqueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest payload accepted, in bytes. Default 256 KiB.
    pub max_payload_bytes: usize,
    /// The longest delay accepted. Default 365 days.
    pub max_delay: Duration,
    /// The most headers a message may carry. Default 64.
    pub max_headers: usize,
    /// The most e-mail recipients one message may name. Default 100.
    pub max_recipients: usize,
    /// The deepest chain of follow-up messages. Default 5.
    pub max_depth: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 256 * 1024,
            max_delay: Duration::from_secs(365 * 24 * 3600),
            max_headers: 64,
            max_recipients: 100,
            max_depth: 5,
        }
    }
}

/// What caused a follow-up message: the handler and message it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// The consumer whose handler emitted the message.
    pub handler: ConsumerName,
    /// The message being handled.
    pub message_id: MessageId,
    /// Its topic.
    pub topic: Topic,
    /// 1 for a message emitted by a handler of an original message, and so on.
    pub depth: u32,
}

/// A message before it is written: built by the application, validated at enqueue.
///
/// Builder methods never fail; [`NewMessage::validate`] (called by every store's enqueue)
/// reports the first invalid field as [`crate::ErrorKind::InvalidInput`], and nothing is
/// written.
#[derive(Clone, Debug)]
pub struct NewMessage {
    topic: String,
    payload: Vec<u8>,
    tenant: Option<String>,
    ordering_key: Option<String>,
    idempotency_key: Option<String>,
    delay: Delay,
    headers: Vec<(String, std::result::Result<String, ()>)>,
    cause: Option<Cause>,
    emails: Vec<String>,
    error: Option<Error>,
}

#[derive(Clone, Copy, Debug)]
enum Delay {
    None,
    For(Duration),
    At(Timestamp),
}

impl NewMessage {
    /// A message whose payload is the JSON text of `data`.
    pub fn new(topic: impl Into<String>, data: serde_json::Value) -> Self {
        let payload = serde_json::to_vec(&data).unwrap_or_default();
        Self::raw(topic, payload)
    }

    /// A message whose payload is the given bytes (JSON by convention; sent as-is).
    pub fn raw(topic: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        NewMessage {
            topic: topic.into(),
            payload: payload.into(),
            tenant: None,
            ordering_key: None,
            idempotency_key: None,
            delay: Delay::None,
            headers: Vec::new(),
            cause: None,
            emails: Vec::new(),
            error: None,
        }
    }

    /// The tenant (default: [`TenantId::default`]).
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The ordering key: deliveries with the same key to the same destination are
    /// delivered in order.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// The idempotency key: a second enqueue with the same `(tenant, topic, key)` writes
    /// nothing and returns the first message's id.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Deliver no earlier than `d` from now (at most [`Limits::max_delay`]).
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Delay::For(d);
        self
    }

    /// Deliver no earlier than `at` (a past time means now).
    pub fn available_at(mut self, at: Timestamp) -> Self {
        self.delay = Delay::At(at);
        self
    }

    /// Add a header (carried to handlers; not sent to webhooks). The value must be UTF-8.
    pub fn header(mut self, name: impl Into<String>, value: impl AsRef<[u8]>) -> Self {
        let value = std::str::from_utf8(value.as_ref())
            .map(str::to_owned)
            .map_err(|_| ());
        self.headers.push((name.into(), value));
        self
    }

    /// Also deliver this message by e-mail to `recipient` (an address or a reference your
    /// resolver understands).
    pub fn email(mut self, recipient: impl Into<String>) -> Self {
        self.emails.push(recipient.into());
        self
    }

    /// Record the message this one follows from (set by the dispatcher for handler output).
    pub fn caused_by(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }

    /// Make validation fail with `error` (used by helpers that build messages and cannot
    /// fail at that point).
    pub fn poisoned(mut self, error: Error) -> Self {
        self.error = Some(error);
        self
    }

    /// The topic as given (unvalidated).
    pub fn topic_str(&self) -> &str {
        &self.topic
    }

    /// Validate every field against `limits` and the current time.
    pub fn validate(self, limits: &Limits, now: Timestamp) -> Result<ValidMessage> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let topic = Topic::new(self.topic)?;
        if self.payload.len() > limits.max_payload_bytes {
            return Err(Error::invalid_input(
                "payload",
                format!(
                    "is larger than the limit of {} bytes",
                    limits.max_payload_bytes
                ),
            ));
        }
        let tenant = match self.tenant {
            Some(t) => TenantId::new(t)?,
            None => TenantId::default(),
        };
        let ordering_key = self.ordering_key.map(OrderingKey::new).transpose()?;
        let idempotency_key = self.idempotency_key.map(IdempotencyKey::new).transpose()?;
        let available_at = match self.delay {
            Delay::None => now,
            Delay::For(d) => {
                if d > limits.max_delay {
                    return Err(Error::invalid_input(
                        "delay",
                        "is longer than the maximum delay",
                    ));
                }
                now.saturating_add(d)
            }
            Delay::At(at) => {
                if at > now.saturating_add(limits.max_delay) {
                    return Err(Error::invalid_input(
                        "available_at",
                        "is further ahead than the maximum delay",
                    ));
                }
                at.max(now)
            }
        };
        if self.headers.len() > limits.max_headers {
            return Err(Error::invalid_input("headers", "too many headers"));
        }
        let mut headers = BTreeMap::new();
        for (name, value) in self.headers {
            check_header_name(&name)?;
            let value = value
                .map_err(|()| Error::invalid_input("headers", "a header value is not UTF-8"))?;
            if value.len() > 8 * 1024 || value.chars().any(|c| c.is_control() && c != '\t') {
                return Err(Error::invalid_input(
                    "headers",
                    "a header value is over 8 KiB or holds control characters",
                ));
            }
            headers.insert(name, value);
        }
        if let Some(cause) = &self.cause {
            if cause.depth > limits.max_depth {
                return Err(Error::invalid_input(
                    "cause",
                    format!(
                        "the chain of follow-up messages is deeper than {}",
                        limits.max_depth
                    ),
                ));
            }
        }
        if self.emails.len() > limits.max_recipients {
            return Err(Error::invalid_input(
                "recipient",
                "too many e-mail recipients",
            ));
        }
        let mut emails: Vec<Recipient> = Vec::with_capacity(self.emails.len());
        for e in self.emails {
            let r = Recipient::new(e)?;
            if !emails.contains(&r) {
                emails.push(r);
            }
        }
        Ok(ValidMessage {
            topic,
            payload: self.payload,
            tenant,
            ordering_key,
            idempotency_key,
            available_at,
            headers,
            cause: self.cause,
            emails,
        })
    }
}

fn check_header_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_input(
            "headers",
            "a header name must be 1-128 ASCII letters, digits, '-', '_' or '.'",
        ))
    }
}

/// A validated [`NewMessage`]: what a store writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidMessage {
    /// The topic.
    pub topic: Topic,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// The tenant.
    pub tenant: TenantId,
    /// The ordering key.
    pub ordering_key: Option<OrderingKey>,
    /// The idempotency key.
    pub idempotency_key: Option<IdempotencyKey>,
    /// When it becomes due.
    pub available_at: Timestamp,
    /// Headers.
    pub headers: BTreeMap<String, String>,
    /// The cause of a follow-up message.
    pub cause: Option<Cause>,
    /// E-mail recipients, deduplicated, in order.
    pub emails: Vec<Recipient>,
}

/// A stored message (one event).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Its id (UUIDv7).
    pub id: MessageId,
    /// The event type.
    pub topic: Topic,
    /// The payload, byte for byte as enqueued.
    pub payload: Vec<u8>,
    /// The tenant.
    pub tenant: TenantId,
    /// The ordering key, when one was given.
    pub ordering_key: Option<OrderingKey>,
    /// The idempotency key, when one was given.
    pub idempotency_key: Option<IdempotencyKey>,
    /// When its deliveries first became due.
    pub available_at: Timestamp,
    /// Headers.
    pub headers: BTreeMap<String, String>,
    /// The message and handler that emitted it.
    pub cause: Option<Cause>,
    /// When it was written.
    pub created_at: Timestamp,
}

impl Message {
    /// The payload parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.payload)
            .map_err(|e| Error::invalid_input("payload", "is not JSON").with_source(e))
    }
}

/// The kind of a [`Destination`], as stored in a `kind` column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DestinationKind {
    /// An in-process consumer.
    Handler,
    /// A webhook endpoint.
    Webhook,
    /// An e-mail recipient.
    Email,
}

impl DestinationKind {
    /// `handler`, `webhook` or `email`.
    pub fn as_str(self) -> &'static str {
        match self {
            DestinationKind::Handler => "handler",
            DestinationKind::Webhook => "webhook",
            DestinationKind::Email => "email",
        }
    }

    /// Parse [`DestinationKind::as_str`].
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "handler" => Ok(DestinationKind::Handler),
            "webhook" => Ok(DestinationKind::Webhook),
            "email" => Ok(DestinationKind::Email),
            _ => Err(Error::invalid_input(
                "destination",
                "unknown destination kind",
            )),
        }
    }
}

/// Where one copy of a message goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "target", rename_all = "lowercase")]
pub enum Destination {
    /// A named in-process consumer.
    Handler(ConsumerName),
    /// A webhook endpoint.
    Webhook(EndpointId),
    /// An e-mail recipient.
    Email(Recipient),
}

impl Destination {
    /// The kind.
    pub fn kind(&self) -> DestinationKind {
        match self {
            Destination::Handler(_) => DestinationKind::Handler,
            Destination::Webhook(_) => DestinationKind::Webhook,
            Destination::Email(_) => DestinationKind::Email,
        }
    }

    /// The target as text: the consumer name, the endpoint id, or the recipient.
    pub fn target(&self) -> String {
        match self {
            Destination::Handler(c) => c.to_string(),
            Destination::Webhook(e) => e.to_string(),
            Destination::Email(r) => r.to_string(),
        }
    }

    /// Rebuild from a stored `(kind, target)` pair.
    pub fn from_parts(kind: &str, target: &str) -> Result<Self> {
        Ok(match DestinationKind::parse(kind)? {
            DestinationKind::Handler => Destination::Handler(ConsumerName::new(target)?),
            DestinationKind::Webhook => Destination::Webhook(EndpointId::parse(target)?),
            DestinationKind::Email => Destination::Email(Recipient::new(target)?),
        })
    }

    /// The endpoint id of a webhook destination.
    pub fn endpoint(&self) -> Option<EndpointId> {
        match self {
            Destination::Webhook(e) => Some(*e),
            _ => None,
        }
    }
}

/// The state of a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DeliveryStatus {
    /// Waiting until `next_attempt_at`.
    Pending,
    /// Claimed by a worker under a lease.
    Processing,
    /// An e-mail handed to the mailer (marked before the send, §8.3).
    Sending,
    /// Delivered.
    Succeeded,
    /// Held after a 401/403: probed every `held_probe_interval`, released on a 2xx or a
    /// secret/URL change.
    Held,
    /// Given up; can be replayed.
    Dead,
}

impl DeliveryStatus {
    /// Every status, in a stable order.
    pub const ALL: [DeliveryStatus; 6] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Processing,
        DeliveryStatus::Sending,
        DeliveryStatus::Succeeded,
        DeliveryStatus::Held,
        DeliveryStatus::Dead,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Processing => "processing",
            DeliveryStatus::Sending => "sending",
            DeliveryStatus::Succeeded => "succeeded",
            DeliveryStatus::Held => "held",
            DeliveryStatus::Dead => "dead",
        }
    }

    /// Parse [`DeliveryStatus::as_str`].
    pub fn parse(s: &str) -> Result<Self> {
        DeliveryStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| Error::invalid_input("status", "unknown delivery status"))
    }

    /// `succeeded` or `dead`: nothing more will happen without an operator.
    pub fn is_finished(self) -> bool {
        matches!(self, DeliveryStatus::Succeeded | DeliveryStatus::Dead)
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a delivery is dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DeadReason {
    /// The retry budget is spent.
    MaxAttempts,
    /// A handler discarded it as permanently failed.
    Permanent,
    /// The endpoint answered 410 Gone (and was disabled).
    Gone,
    /// The endpoint no longer exists.
    EndpointRemoved,
    /// The endpoint is disabled.
    EndpointDisabled,
    /// The mail service refused the message or its configuration.
    MailRefused,
    /// A send whose outcome is unknown cannot be repeated safely (non-idempotent mailer).
    UnknownOutcome,
    /// The message could not be rendered for its channel (e.g. an e-mail payload without a
    /// subject).
    Unrenderable,
}

impl DeadReason {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::MaxAttempts => "max_attempts",
            DeadReason::Permanent => "permanent",
            DeadReason::Gone => "gone",
            DeadReason::EndpointRemoved => "endpoint-removed",
            DeadReason::EndpointDisabled => "endpoint-disabled",
            DeadReason::MailRefused => "mail-refused",
            DeadReason::UnknownOutcome => "unknown-outcome",
            DeadReason::Unrenderable => "unrenderable",
        }
    }

    /// Parse [`DeadReason::as_str`].
    pub fn parse(s: &str) -> Result<Self> {
        use DeadReason::*;
        [
            MaxAttempts,
            Permanent,
            Gone,
            EndpointRemoved,
            EndpointDisabled,
            MailRefused,
            UnknownOutcome,
            Unrenderable,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| Error::invalid_input("dead_reason", "unknown reason"))
    }

    /// Whether the attempt that met this reason is refunded (nothing was tried).
    pub fn refunds_attempt(self) -> bool {
        matches!(
            self,
            DeadReason::EndpointRemoved | DeadReason::EndpointDisabled
        )
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of a failed attempt, as stored in the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ErrorClass {
    /// The deadline passed (connect, headers or body; a handler's timeout).
    Timeout,
    /// Connection refused or reset, TLS failure.
    Network,
    /// The host did not resolve.
    Dns,
    /// The egress policy refused the address or scheme, or the receiver redirected.
    EgressRefused,
    /// A 4xx answer.
    Response4xx,
    /// A 5xx answer.
    Response5xx,
    /// A handler returned `Retry`.
    HandlerError,
    /// A handler asked to snooze.
    Snoozed,
    /// A handler discarded the message.
    Discarded,
    /// The mail service did not take the message (and did not send it).
    MailNotSent,
    /// The mail service's answer is unknown: it may have sent the message.
    MailUnknown,
    /// The mail service refused the message or its configuration.
    MailRefused,
    /// The message could not be rendered for its channel.
    Unrenderable,
}

impl ErrorClass {
    /// The stored name (`response-5xx`, `egress-refused`, ...).
    pub fn as_str(self) -> &'static str {
        use ErrorClass::*;
        match self {
            Timeout => "timeout",
            Network => "network",
            Dns => "dns",
            EgressRefused => "egress-refused",
            Response4xx => "response-4xx",
            Response5xx => "response-5xx",
            HandlerError => "handler-error",
            Snoozed => "snoozed",
            Discarded => "discarded",
            MailNotSent => "mail-not-sent",
            MailUnknown => "mail-unknown",
            MailRefused => "mail-refused",
            Unrenderable => "unrenderable",
        }
    }

    /// Parse [`ErrorClass::as_str`].
    pub fn parse(s: &str) -> Result<Self> {
        use ErrorClass::*;
        [
            Timeout,
            Network,
            Dns,
            EgressRefused,
            Response4xx,
            Response5xx,
            HandlerError,
            Snoozed,
            Discarded,
            MailNotSent,
            MailUnknown,
            MailRefused,
            Unrenderable,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
        .ok_or_else(|| Error::invalid_input("error_class", "unknown error class"))
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one attempt: success, or a failure of some class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttemptOutcome {
    /// Delivered.
    Succeeded,
    /// Failed.
    Failed(ErrorClass),
}

impl AttemptOutcome {
    /// `succeeded` or the error class name.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed(c) => c.as_str(),
        }
    }

    /// Parse [`AttemptOutcome::as_str`].
    pub fn parse(s: &str) -> Result<Self> {
        if s == "succeeded" {
            Ok(AttemptOutcome::Succeeded)
        } else {
            ErrorClass::parse(s).map(AttemptOutcome::Failed)
        }
    }
}

/// The most bytes of a response kept in the ledger.
pub const EXCERPT_LIMIT: usize = 300;

/// Cut `text` to at most [`EXCERPT_LIMIT`] bytes on a character boundary, and replace
/// control characters (other than newline and tab) so the ledger stays printable.
pub fn excerpt(text: &str) -> String {
    let mut out = String::with_capacity(EXCERPT_LIMIT.min(text.len()));
    for c in text.chars() {
        let c = if c.is_control() && c != '\n' && c != '\t' {
            '\u{fffd}'
        } else {
            c
        };
        if out.len() + c.len_utf8() > EXCERPT_LIMIT {
            break;
        }
        out.push(c);
    }
    out
}

/// One try of one delivery, as recorded by the dispatcher and appended to the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// When the try started.
    pub started_at: Timestamp,
    /// When it finished.
    pub finished_at: Timestamp,
    /// Success or the error class.
    pub outcome: AttemptOutcome,
    /// The HTTP status, for webhooks and HTTP mail APIs.
    pub status_code: Option<u16>,
    /// At most [`EXCERPT_LIMIT`] bytes of the answer or error text; never a secret.
    pub excerpt: Option<String>,
}

/// An attempt as read back from the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// The delivery.
    pub delivery_id: DeliveryId,
    /// 1-based position in this delivery's ledger.
    pub number: u32,
    /// Whether this was a probe of a held delivery (it spent no attempt).
    pub probe: bool,
    /// What happened.
    #[serde(flatten)]
    pub record: AttemptRecord,
}

impl Attempt {
    /// How long the try took.
    pub fn duration(&self) -> Duration {
        self.record
            .finished_at
            .duration_since(self.record.started_at)
    }
}

/// The last outcome of a delivery, kept on the delivery row for listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastOutcome {
    /// Success or the error class.
    pub outcome: AttemptOutcome,
    /// The HTTP status.
    pub status_code: Option<u16>,
    /// A short excerpt.
    pub excerpt: Option<String>,
    /// When the attempt finished.
    pub at: Timestamp,
}

impl From<&AttemptRecord> for LastOutcome {
    fn from(r: &AttemptRecord) -> Self {
        LastOutcome {
            outcome: r.outcome,
            status_code: r.status_code,
            excerpt: r.excerpt.clone(),
            at: r.finished_at,
        }
    }
}

/// One message × one destination: the unit that is claimed, retried, held, dead-lettered
/// and replayed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// Its id (UUIDv7).
    pub id: DeliveryId,
    /// The message.
    pub message_id: MessageId,
    /// The message's tenant.
    pub tenant: TenantId,
    /// The message's topic.
    pub topic: Topic,
    /// The message's ordering key.
    pub ordering_key: Option<OrderingKey>,
    /// Where it goes.
    pub destination: Destination,
    /// Its state.
    pub status: DeliveryStatus,
    /// Attempts spent (claims count one, refunds give it back, probes are free).
    pub attempts: u32,
    /// Snoozes taken.
    pub snoozes: u32,
    /// When it is next due (pending, held) or when its lease ends (processing, sending).
    pub next_attempt_at: Timestamp,
    /// The lease end while claimed.
    pub lease_until: Option<Timestamp>,
    /// The last outcome.
    pub last_outcome: Option<LastOutcome>,
    /// Why it is dead.
    pub dead_reason: Option<DeadReason>,
    /// When it was written.
    pub created_at: Timestamp,
    /// When it was last changed.
    pub updated_at: Timestamp,
    /// When it reached `succeeded` or `dead`.
    pub completed_at: Option<Timestamp>,
}

impl Delivery {
    /// A new pending delivery of `message` to `destination`.
    pub fn new(id: DeliveryId, message: &Message, destination: Destination) -> Self {
        Delivery {
            id,
            message_id: message.id,
            tenant: message.tenant.clone(),
            topic: message.topic.clone(),
            ordering_key: message.ordering_key.clone(),
            destination,
            status: DeliveryStatus::Pending,
            attempts: 0,
            snoozes: 0,
            next_attempt_at: message.available_at,
            lease_until: None,
            last_outcome: None,
            dead_reason: None,
            created_at: message.created_at,
            updated_at: message.created_at,
            completed_at: None,
        }
    }

    /// The endpoint of a webhook delivery.
    pub fn endpoint(&self) -> Option<EndpointId> {
        self.destination.endpoint()
    }
}

/// The JSON envelope sent to webhooks: `{"type", "timestamp", "data"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The topic.
    #[serde(rename = "type")]
    pub kind: String,
    /// RFC 3339 time of the message.
    pub timestamp: String,
    /// The payload (JSON, or a string when the payload is not JSON).
    pub data: serde_json::Value,
}

impl Envelope {
    /// The envelope of `message`.
    pub fn of(message: &Message) -> Self {
        let data = serde_json::from_slice(&message.payload).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&message.payload).into_owned())
        });
        Envelope {
            kind: message.topic.to_string(),
            timestamp: message.created_at.to_rfc3339(),
            data,
        }
    }

    /// The exact bytes sent.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_unix_millis(1_700_000_000_000).unwrap()
    }

    #[test]
    fn new_message_validates_each_field() {
        let limits = Limits::default();
        let ok = NewMessage::new("order.created", serde_json::json!({"id": 1}))
            .tenant("acme")
            .ordering_key("order:1")
            .idempotency_key("k-1")
            .header("trace", "abc")
            .email("a@example.com")
            .email("a@example.com")
            .delay(Duration::from_secs(60))
            .validate(&limits, now())
            .unwrap();
        assert_eq!(ok.tenant.as_str(), "acme");
        assert_eq!(
            ok.available_at,
            now().saturating_add(Duration::from_secs(60))
        );
        assert_eq!(ok.emails.len(), 1, "recipients are deduplicated");

        let field = |m: NewMessage| m.validate(&limits, now()).unwrap_err().field();
        let base = || NewMessage::new("order.created", serde_json::json!(1));
        assert_eq!(
            field(NewMessage::new("", serde_json::json!(1))),
            Some("topic")
        );
        assert_eq!(
            field(NewMessage::raw("a.b", vec![0u8; 256 * 1024 + 1])),
            Some("payload")
        );
        assert_eq!(field(base().tenant("a b")), Some("tenant"));
        assert_eq!(
            field(base().idempotency_key("has space")),
            Some("idempotency_key")
        );
        assert_eq!(field(base().ordering_key("")), Some("ordering_key"));
        assert_eq!(field(base().header("x", [0xff, 0xfe])), Some("headers"));
        assert_eq!(field(base().header("bad name", "v")), Some("headers"));
        assert_eq!(
            field(base().delay(Duration::from_secs(400 * 86_400))),
            Some("delay")
        );
        assert_eq!(field(base().email("")), Some("recipient"));
    }

    #[test]
    fn past_available_at_means_now() {
        let m = NewMessage::new("a", serde_json::json!(1))
            .available_at(Timestamp::EPOCH)
            .validate(&Limits::default(), now())
            .unwrap();
        assert_eq!(m.available_at, now());
    }

    #[test]
    fn cause_depth_is_limited() {
        let cause = |depth| Cause {
            handler: ConsumerName::new("h").unwrap(),
            message_id: MessageId::from_uuid(uuid::Uuid::from_u128(
                0x0190_0000_0000_7000_8000_0000_0000_0001,
            ))
            .unwrap(),
            topic: Topic::new("a").unwrap(),
            depth,
        };
        let limits = Limits::default();
        assert!(NewMessage::new("a", serde_json::json!(1))
            .caused_by(cause(5))
            .validate(&limits, now())
            .is_ok());
        let e = NewMessage::new("a", serde_json::json!(1))
            .caused_by(cause(6))
            .validate(&limits, now())
            .unwrap_err();
        assert_eq!(e.field(), Some("cause"));
    }

    #[test]
    fn names_round_trip() {
        for s in DeliveryStatus::ALL {
            assert_eq!(DeliveryStatus::parse(s.as_str()).unwrap(), s);
        }
        for c in [
            "timeout",
            "network",
            "dns",
            "egress-refused",
            "response-4xx",
            "response-5xx",
        ] {
            assert_eq!(ErrorClass::parse(c).unwrap().as_str(), c);
        }
        assert_eq!(
            AttemptOutcome::parse("succeeded").unwrap(),
            AttemptOutcome::Succeeded
        );
        assert_eq!(
            DeadReason::parse("endpoint-removed").unwrap(),
            DeadReason::EndpointRemoved
        );
        let d = Destination::Email(Recipient::new("x@example.com").unwrap());
        assert_eq!(
            Destination::from_parts(d.kind().as_str(), &d.target()).unwrap(),
            d
        );
    }

    #[test]
    fn excerpts_are_bounded_on_char_boundaries() {
        let long = "é".repeat(400);
        let e = excerpt(&long);
        assert!(e.len() <= EXCERPT_LIMIT);
        assert!(e.chars().all(|c| c == 'é'));
        assert_eq!(excerpt("ok\u{7}"), "ok\u{fffd}");
    }

    #[test]
    fn envelope_shape() {
        let m = Message {
            id: MessageId::from_uuid(uuid::Uuid::from_u128(
                0x0190_0000_0000_7000_8000_0000_0000_0001,
            ))
            .unwrap(),
            topic: Topic::new("order.created").unwrap(),
            payload: br#"{"id":1}"#.to_vec(),
            tenant: TenantId::default(),
            ordering_key: None,
            idempotency_key: None,
            available_at: now(),
            headers: Default::default(),
            cause: None,
            created_at: now(),
        };
        let v: serde_json::Value = serde_json::from_slice(&Envelope::of(&m).to_bytes()).unwrap();
        assert_eq!(v["type"], "order.created");
        assert_eq!(v["data"]["id"], 1);
        assert_eq!(v["timestamp"], "2023-11-14T22:13:20.000Z");
    }
}
