//! Deliveries: destinations, statuses, attempts and the ledger's vocabulary.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::ids::{
    ConsumerName, DeliveryId, EndpointId, MessageId, OrderingKey, Recipient, TenantId, Topic,
};
use crate::model::attempt_detail::AttemptDetail;
use crate::model::message::Message;
use crate::time::Timestamp;
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
    /// secret/URL change. Also a delivery waiting for its paused or disabled endpoint: due
    /// never (paused) or when the disabled endpoint's hold expires, released when the
    /// endpoint is resumed or re-enabled.
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

    /// `Ok` when `OperatorStore::cancel` may cancel (`pending`, `held`), else the `Conflict`.
    pub fn check_cancel(self) -> Result<()> {
        match self {
            DeliveryStatus::Pending | DeliveryStatus::Held => Ok(()),
            DeliveryStatus::Processing | DeliveryStatus::Sending => Err(Error::new(
                ErrorKind::Conflict,
                "the delivery is in flight (it may already be sent) and cannot be cancelled",
            )),
            DeliveryStatus::Succeeded | DeliveryStatus::Dead => Err(Error::new(
                ErrorKind::Conflict,
                "the delivery is already finished and cannot be cancelled",
            )),
        }
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
    /// An operator cancelled it before it was sent (`OperatorStore::cancel`).
    Cancelled,
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
            DeadReason::Cancelled => "cancelled",
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
            Cancelled,
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
    /// The egress policy refused the address or scheme.
    EgressRefused,
    /// The receiver answered with a redirect (3xx), which is never followed.
    Redirect,
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
    /// The broker could not take the message now (no responders, no stream leader, a
    /// negative confirm).
    BrokerUnavailable,
    /// Nothing on the broker takes the subject (no stream; unroutable; no exchange).
    BrokerNoRoute,
    /// The broker denied the permission to publish.
    BrokerDenied,
    /// The broker refused the message itself (e.g. too large).
    BrokerRejected,
    /// The endpoint's signing secret could not be opened (a wrong or missing vault key):
    /// our configuration, not the receiver; nothing was sent and no attempt is spent.
    SecretUnavailable,
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
            Redirect => "redirect",
            Response4xx => "response-4xx",
            Response5xx => "response-5xx",
            HandlerError => "handler-error",
            Snoozed => "snoozed",
            Discarded => "discarded",
            MailNotSent => "mail-not-sent",
            MailUnknown => "mail-unknown",
            MailRefused => "mail-refused",
            Unrenderable => "unrenderable",
            BrokerUnavailable => "broker-unavailable",
            BrokerNoRoute => "broker-no-route",
            BrokerDenied => "broker-denied",
            BrokerRejected => "broker-rejected",
            SecretUnavailable => "secret-unavailable",
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
            Redirect,
            Response4xx,
            Response5xx,
            HandlerError,
            Snoozed,
            Discarded,
            MailNotSent,
            MailUnknown,
            MailRefused,
            Unrenderable,
            BrokerUnavailable,
            BrokerNoRoute,
            BrokerDenied,
            BrokerRejected,
            SecretUnavailable,
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
    /// What the attempt sent and got back in full (webhooks and HTTP mail); `None` for
    /// handlers, brokers and attempts recorded before this was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<AttemptDetail>>,
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
    /// The run it belongs to: 1, then one more per replay.
    pub run: u32,
    /// When the attempt was due (the delivery's `next_attempt_at` when it was claimed);
    /// `None` for attempts recorded before this was kept.
    pub scheduled_at: Option<Timestamp>,
    /// The size and SHA-256 of the payload the attempt carried.
    pub payload: PayloadFingerprint,
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

/// The size and SHA-256 digest of a payload, as the ledger shows it.
///
/// A message's payload never changes, so every attempt of every run of its deliveries
/// carried the same bytes: stores derive the fingerprint from the stored payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadFingerprint {
    /// The payload's length in bytes.
    pub size: u64,
    /// The lowercase hex SHA-256 of the payload bytes.
    pub sha256: String,
}

impl PayloadFingerprint {
    /// The fingerprint of `payload`.
    pub fn of(payload: &[u8]) -> Self {
        use sha2::Digest;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = sha2::Sha256::digest(payload);
        // Two hex digits per byte, written directly (no formatting machinery per byte: this
        // runs for every ledger record of the in-memory store).
        let mut sha256 = String::with_capacity(64);
        for b in digest {
            sha256.push(char::from(HEX[usize::from(b >> 4)]));
            sha256.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
        PayloadFingerprint {
            size: payload.len() as u64,
            sha256,
        }
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
    /// The run: 1, then one more per replay (the earlier runs' attempts stay in the ledger).
    pub run: u32,
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
            run: 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_fingerprint_is_size_and_sha256_hex() {
        let f = PayloadFingerprint::of(b"abc");
        assert_eq!(f.size, 3);
        assert_eq!(
            f.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(PayloadFingerprint::of(b"").size, 0);
    }
}
