//! Messages: what the application enqueues ([`NewMessage`]), what is stored ([`Message`]),
//! and the webhook envelope.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{
    ConsumerName, IdempotencyKey, MessageId, OrderingKey, Recipient, TenantId, Topic,
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
            // The producer's trace context, when the application installed a source.
            headers: crate::trace::current_traceparent()
                .map(|tp| vec![(crate::TRACEPARENT.to_owned(), Ok(tp.to_string()))])
                .unwrap_or_default(),
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

    /// Carry `traceparent` (a W3C trace context) to the dispatcher's span, the handler's
    /// `Context` and, when the dispatcher forwards it, the webhook request. Replaces the one
    /// taken from the installed trace source ([`crate::set_trace_source`]).
    pub fn traceparent(mut self, traceparent: &crate::Traceparent) -> Self {
        self.headers.retain(|(n, _)| n != crate::TRACEPARENT);
        self.headers
            .push((crate::TRACEPARENT.to_owned(), Ok(traceparent.to_string())));
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

    /// Set the tenant to `tenant` unless one was named (follow-ups inherit their cause's).
    pub fn inherit_tenant(mut self, tenant: &TenantId) -> Self {
        if self.tenant.is_none() {
            self.tenant = Some(tenant.as_str().to_owned());
        }
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

/// Whether `payload` is one JSON text (RFC 8259: any value, surrounding whitespace allowed,
/// valid UTF-8). Numbers are checked for syntax only, never evaluated, and nesting depth is
/// not limited, so every JSON text the application wrote counts, however large its numbers.
pub fn is_json_text(payload: &[u8]) -> bool {
    std::str::from_utf8(payload)
        .is_ok_and(|s| serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok())
}

/// The JSON envelope sent to webhooks: `{"type", "timestamp", "data"}`.
///
/// `data` embeds the payload **byte for byte** when the payload is JSON text
/// ([`is_json_text`]): large integers, duplicate keys, exponent forms, escapes and
/// whitespace reach the receiver exactly as enqueued. A payload that is not JSON is sent as a
/// JSON string of its text (invalid UTF-8 replaced by U+FFFD); use a raw endpoint
/// ([`crate::BodyFormat::Raw`]) to send such bytes unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The topic.
    pub kind: String,
    /// RFC 3339 time of the message.
    pub timestamp: String,
    /// The JSON text of `data`: the payload itself, or the payload as a JSON string when it
    /// is not JSON.
    pub data: String,
}

impl Envelope {
    /// The envelope of `message`.
    pub fn of(message: &Message) -> Self {
        let data = match std::str::from_utf8(&message.payload) {
            Ok(text) if is_json_text(text.as_bytes()) => text.to_owned(),
            _ => json_string(&String::from_utf8_lossy(&message.payload)),
        };
        Envelope {
            kind: message.topic.to_string(),
            timestamp: message.created_at.to_rfc3339(),
            data,
        }
    }

    /// The exact bytes of `message`'s envelope, written in one buffer: the same bytes as
    /// `Envelope::of(message).to_bytes()` without the intermediate strings (the payload is
    /// checked for JSON once, then copied once, byte for byte).
    pub fn bytes_of(message: &Message) -> Vec<u8> {
        let kind = json_string(message.topic.as_str());
        let timestamp = message.created_at.rfc3339_bytes();
        let json = is_json_text(&message.payload);
        let quoted;
        let data: &[u8] = if json {
            &message.payload
        } else {
            quoted = json_string(&String::from_utf8_lossy(&message.payload));
            quoted.as_bytes()
        };
        // The RFC 3339 form has no character JSON escapes: quoted by hand.
        let mut out = Vec::with_capacity(kind.len() + timestamp.len() + data.len() + 34);
        out.extend_from_slice(b"{\"type\":");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b",\"timestamp\":\"");
        out.extend_from_slice(&timestamp);
        out.extend_from_slice(b"\",\"data\":");
        out.extend_from_slice(data);
        out.push(b'}');
        out
    }

    /// The exact bytes sent: `{"type":…,"timestamp":…,"data":…}` with `data` written as is.
    pub fn to_bytes(&self) -> Vec<u8> {
        let kind = json_string(&self.kind);
        let timestamp = json_string(&self.timestamp);
        let mut out = Vec::with_capacity(kind.len() + timestamp.len() + self.data.len() + 32);
        out.extend_from_slice(b"{\"type\":");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b",\"timestamp\":");
        out.extend_from_slice(timestamp.as_bytes());
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(self.data.as_bytes());
        out.push(b'}');
        out
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    // Printable ASCII without a quote or a backslash (every topic) is its own JSON text.
    if s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return out;
    }
    // Serialising a `str` cannot fail.
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
