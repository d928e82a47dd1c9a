//! The attempt in full (DESIGN §18) in the API: what an attempt sent and got back, and the
//! payload its delivery carried.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use outboxkit_core::model::PayloadFingerprint;
use outboxkit_core::{Attempt, AttemptDetail, Message};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{time, DeliveryView};

/// One header as sent or received.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WireHeader {
    /// The name (as it went on the wire; lowercase for what outbox sent).
    pub name: String,
    /// The value; a secret value (an endpoint's secret header, `authorization`) is
    /// `[redacted]`.
    pub value: String,
}

fn wire(headers: &[(String, String)]) -> Vec<WireHeader> {
    headers
        .iter()
        .map(|(name, value)| WireHeader {
            name: name.clone(),
            value: value.clone(),
        })
        .collect()
}

/// How long the parts of an attempt took, in microseconds.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TimingView {
    /// Opening the connection (DNS, TCP, TLS); null when the attempt reused one.
    pub connect_us: Option<u64>,
    /// Until the response's status line and headers arrived; null without an answer.
    pub first_byte_us: Option<u64>,
    /// The whole attempt.
    pub total_us: u64,
}

fn us(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// What an attempt sent and got back.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AttemptDetailView {
    /// The request headers as sent, in order (signatures included, secrets redacted).
    pub request_headers: Vec<WireHeader>,
    /// The response headers, in order (empty without an answer).
    pub response_headers: Vec<WireHeader>,
    /// The response body as kept (at most the relay's cap), base64.
    pub response_body_base64: String,
    /// The same body as text, invalid UTF-8 replaced.
    pub response_body_text: String,
    /// The kept body's length in bytes.
    pub response_body_size: usize,
    /// The receiver sent more than the cap.
    pub response_body_truncated: bool,
    /// The timings.
    pub timing: TimingView,
    /// The address connected to (`ip:port`), when known.
    pub remote_addr: Option<String>,
}

impl From<&AttemptDetail> for AttemptDetailView {
    fn from(d: &AttemptDetail) -> Self {
        AttemptDetailView {
            request_headers: wire(&d.request_headers),
            response_headers: wire(&d.response_headers),
            response_body_base64: B64.encode(&d.response_body),
            response_body_text: d.response_text(),
            response_body_size: d.response_body.len(),
            response_body_truncated: d.response_body_truncated,
            timing: TimingView {
                connect_us: d.timing.connect.map(us),
                first_byte_us: d.timing.first_byte.map(us),
                total_us: us(d.timing.total),
            },
            remote_addr: d.remote_addr.clone(),
        }
    }
}

/// The reference to the exact payload bytes an attempt carried.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PayloadRef {
    /// Length in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256.
    pub sha256: String,
}

/// The payload of the delivery's message, once (every attempt carried these bytes).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PayloadView {
    /// The message.
    pub message_id: String,
    /// Length in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 (what each attempt's `payload` names).
    pub sha256: String,
    /// The exact bytes, base64.
    pub base64: String,
    /// The bytes as text, invalid UTF-8 replaced.
    pub text: String,
    /// The payload parsed, when it is JSON.
    #[schema(value_type = Option<Object>)]
    pub json: Option<serde_json::Value>,
}

impl From<&Message> for PayloadView {
    fn from(m: &Message) -> Self {
        let fp = PayloadFingerprint::of(&m.payload);
        PayloadView {
            message_id: m.id.to_string(),
            size: fp.size,
            sha256: fp.sha256,
            base64: B64.encode(&m.payload),
            text: String::from_utf8_lossy(&m.payload).into_owned(),
            json: serde_json::from_slice(&m.payload).ok(),
        }
    }
}

/// One attempt in the ledger.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    /// 1, 2, …
    pub number: u32,
    /// The run it belongs to.
    pub run: u32,
    /// A probe of a held delivery (spent no attempt).
    pub probe: bool,
    /// When it started.
    pub started_at: String,
    /// How long it took.
    pub duration_ms: u64,
    /// `succeeded` or an error class.
    pub outcome: String,
    /// The HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// The start of the answer (at most 300 bytes).
    pub excerpt: Option<String>,
    /// The payload bytes it carried (see the delivery's `payload`).
    pub payload: PayloadRef,
    /// What it sent and got back; null when nothing was kept (a handler, a broker, an
    /// attempt recorded before this was kept).
    pub detail: Option<AttemptDetailView>,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        AttemptView {
            number: a.number,
            run: a.run,
            probe: a.probe,
            started_at: time(a.record.started_at),
            duration_ms: u64::try_from(a.duration().as_millis()).unwrap_or(u64::MAX),
            outcome: a.record.outcome.as_str().to_owned(),
            status_code: a.record.status_code,
            excerpt: a.record.excerpt.clone(),
            payload: PayloadRef {
                size: a.payload.size,
                sha256: a.payload.sha256.clone(),
            },
            detail: a.record.detail.as_deref().map(AttemptDetailView::from),
        }
    }
}

/// A delivery with its attempt ledger.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryDetail {
    /// The delivery.
    pub delivery: DeliveryView,
    /// Its message's payload, once.
    pub payload: PayloadView,
    /// Its attempts, oldest first.
    pub attempts: Vec<AttemptView>,
}
