//! The attempt's excerpt and the attempt in full (DESIGN §18): what a webhook or HTTP mail attempt sent and what came
//! back, kept in the ledger beside the attempt's outcome.
//!
//! The payload is not copied here: a message's payload never changes, so the attempt's
//! [`PayloadFingerprint`](super::PayloadFingerprint) (size and SHA-256) together with its
//! delivery's message is the reference to the exact bytes sent.

use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, ErrorKind, Result};

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

/// The response body kept per attempt when nothing else is configured: 16 KiB.
pub const RESPONSE_BODY_CAP_DEFAULT: usize = 16 * 1024;
/// The most a configured cap may be: 64 KiB, the webhook transport's read cap.
pub const RESPONSE_BODY_CAP_MAX: usize = 64 * 1024;

/// Check a configured response-body cap: at most [`RESPONSE_BODY_CAP_MAX`].
pub fn check_response_body_cap(cap: usize) -> Result<usize> {
    if cap > RESPONSE_BODY_CAP_MAX {
        return Err(Error::invalid_input(
            "response_body_cap",
            format!(
                "the response body cap is {cap} bytes; it may be at most \
                 {RESPONSE_BODY_CAP_MAX} (64 KiB, the transport's read cap)"
            ),
        ));
    }
    Ok(cap)
}

/// How long the parts of one attempt took. A reused connection has no `connect`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptTiming {
    /// Time to open the connection (TCP and TLS), when this attempt opened one.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "micros_opt")]
    pub connect: Option<Duration>,
    /// Time from the start until the response's status line and headers arrived.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "micros_opt")]
    pub first_byte: Option<Duration>,
    /// Time from the start until the body was read (or the attempt failed).
    #[serde(with = "micros")]
    pub total: Duration,
}

/// What one attempt sent and got back, in full.
///
/// # Invariants
/// - `request_headers` are the headers as sent, signature values included (they are not
///   secrets), never a secret or an `authorization` value (transports write such a value as
///   [`REDACTED`]).
/// - `response_body` holds at most the configured cap; `response_body_truncated` says the
///   answer was longer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptDetail {
    /// The request's headers as sent, in order.
    pub request_headers: Vec<(String, String)>,
    /// The response's status line and headers arrived: its headers, in order (empty when
    /// there was no answer).
    #[serde(default)]
    pub response_headers: Vec<(String, String)>,
    /// The first bytes of the response body, at most the cap.
    #[serde(default, with = "base64_bytes")]
    pub response_body: Vec<u8>,
    /// The body was longer than the cap.
    #[serde(default)]
    pub response_body_truncated: bool,
    /// The timings.
    pub timing: AttemptTiming,
    /// The address connected to (`ip:port`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_addr: Option<String>,
}

/// The value written in place of a secret header's value.
pub const REDACTED: &str = "[redacted]";

impl AttemptDetail {
    /// The stored form: compact JSON (the body as base64).
    pub fn to_json(&self) -> String {
        // A struct of strings, integers and byte strings always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Read [`AttemptDetail::to_json`] back.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text)
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("stored attempt detail: {e}")))
    }

    /// The bytes this detail adds to the ledger, roughly (headers and body), for the
    /// per-tenant size budget in ARCHITECTURE.md.
    pub fn stored_size(&self) -> usize {
        let headers =
            |h: &[(String, String)]| h.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        headers(&self.request_headers) + headers(&self.response_headers) + self.response_body.len()
    }

    /// The response body as text, with invalid UTF-8 replaced, for display.
    pub fn response_text(&self) -> String {
        String::from_utf8_lossy(&self.response_body).into_owned()
    }

    /// Keep at most `cap` bytes of `body`, marking the rest as cut.
    pub fn set_response_body(&mut self, body: &[u8], cap: usize) {
        let keep = body.len().min(cap);
        self.response_body = body[..keep].to_vec();
        self.response_body_truncated = body.len() > cap;
    }
}

mod micros {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_micros)
    }
}

mod micros_opt {
    use super::*;

    // serde's `with` on an Option field passes the whole Option.
    #[allow(clippy::ref_option)]
    pub fn serialize<S: Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|v| v.map(Duration::from_micros))
    }
}

mod base64_bytes {
    use super::*;

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AttemptDetail {
        let mut d = AttemptDetail {
            request_headers: vec![
                ("webhook-id".into(), "msg_1".into()),
                ("webhook-signature".into(), "v1,abc=".into()),
            ],
            response_headers: vec![("content-type".into(), "text/plain".into())],
            timing: AttemptTiming {
                connect: Some(Duration::from_micros(1_250)),
                first_byte: Some(Duration::from_micros(3_000)),
                total: Duration::from_micros(3_400),
            },
            remote_addr: Some("127.0.0.1:8080".into()),
            ..AttemptDetail::default()
        };
        d.set_response_body(b"ok\xff\x00 <script>", 1024);
        d
    }

    #[test]
    fn round_trips_through_json_byte_for_byte() {
        let d = sample();
        let back = AttemptDetail::from_json(&d.to_json()).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.response_body, b"ok\xff\x00 <script>");
        assert!(!back.response_body_truncated);
    }

    #[test]
    fn the_body_is_cut_at_the_cap_and_marked() {
        let mut d = AttemptDetail::default();
        d.set_response_body(&[b'x'; 100], 10);
        assert_eq!(d.response_body.len(), 10);
        assert!(d.response_body_truncated);
        d.set_response_body(&[b'x'; 10], 10);
        assert!(!d.response_body_truncated);
    }

    #[test]
    fn a_cap_above_the_read_cap_is_refused() {
        assert_eq!(
            check_response_body_cap(RESPONSE_BODY_CAP_MAX).unwrap(),
            65_536
        );
        let e = check_response_body_cap(RESPONSE_BODY_CAP_MAX + 1).unwrap_err();
        assert!(e.to_string().contains("at most 65536"), "{e}");
    }

    #[test]
    fn corrupt_stored_detail_is_an_error() {
        assert!(AttemptDetail::from_json("{\"request_headers\":5}").is_err());
    }

    #[test]
    fn stored_size_counts_headers_and_body() {
        let d = sample();
        let want = "webhook-id".len()
            + "msg_1".len()
            + "webhook-signature".len()
            + 7
            + "content-type".len()
            + "text/plain".len()
            + d.response_body.len();
        assert_eq!(d.stored_size(), want);
    }
}
