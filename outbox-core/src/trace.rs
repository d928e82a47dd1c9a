//! W3C trace context: a message carries the producer's `traceparent` as a header, so the
//! dispatcher's span for each attempt, the handler's [`Traceparent`] and (when the
//! dispatcher opts in) the webhook request continue the producer's trace.
//!
//! Nothing here depends on a tracing backend. A message gets a `traceparent` either
//! explicitly ([`NewMessage::traceparent`](crate::NewMessage::traceparent)) or from the
//! *trace source* the application installs once at start-up with [`set_trace_source`]: a
//! plain function that returns the current span's context (with OpenTelemetry, read it from
//! `tracing::Span::current()` through `tracing-opentelemetry`). Without a source, messages
//! carry no trace context unless one is given.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use crate::{Error, Result};

/// The header name a message carries its trace context under (and the HTTP header sent to
/// webhooks that opt in).
pub const TRACEPARENT: &str = "traceparent";

/// A W3C `traceparent` (version `00`): trace id, parent span id and flags.
///
/// ```
/// use outboxkit_core::Traceparent;
///
/// let tp = Traceparent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
/// assert_eq!(tp.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert!(tp.sampled());
/// assert_eq!(tp.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert!(Traceparent::parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Traceparent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

impl Traceparent {
    /// A trace context from its parts; `None` when either id is all zeros (invalid in W3C).
    pub fn new(trace_id: [u8; 16], parent_id: [u8; 8], flags: u8) -> Option<Self> {
        (trace_id != [0; 16] && parent_id != [0; 8]).then_some(Traceparent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Parse `00-<32 hex>-<16 hex>-<2 hex>` (lowercase, as W3C requires). Other versions
    /// are read by their first four fields, as the specification asks of a version-00
    /// reader; version `ff` is refused.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || Error::invalid_input(TRACEPARENT, "is not a W3C traceparent");
        let mut parts = s.trim().split('-');
        let (Some(version), Some(trace), Some(parent), Some(flags)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let version = hex::<1>(version).ok_or_else(bad)?;
        if version == [0xff] || (version == [0] && parts.next().is_some()) {
            return Err(bad());
        }
        let trace_id = hex::<16>(trace).ok_or_else(bad)?;
        let parent_id = hex::<8>(parent).ok_or_else(bad)?;
        let [flags] = hex::<1>(flags).ok_or_else(bad)?;
        Traceparent::new(trace_id, parent_id, flags).ok_or_else(bad)
    }

    /// The context a message carries in its headers, if any (an unreadable one is ignored).
    pub fn from_headers(headers: &BTreeMap<String, String>) -> Option<Self> {
        headers
            .get(TRACEPARENT)
            .and_then(|v| Traceparent::parse(v).ok())
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> String {
        to_hex(&self.trace_id)
    }

    /// The parent span id, 16 lowercase hex digits.
    pub fn parent_id(&self) -> String {
        to_hex(&self.parent_id)
    }

    /// The trace id's bytes.
    pub fn trace_id_bytes(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The parent span id's bytes.
    pub fn parent_id_bytes(&self) -> [u8; 8] {
        self.parent_id
    }

    /// The trace flags.
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the producer sampled the trace (flag `01`).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

impl fmt::Display for Traceparent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id(),
            self.parent_id(),
            self.flags
        )
    }
}

impl fmt::Debug for Traceparent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Traceparent({self})")
    }
}

impl std::str::FromStr for Traceparent {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Traceparent::parse(s)
    }
}

/// A function returning the current span's trace context (see [`set_trace_source`]).
pub type TraceSource = fn() -> Option<Traceparent>;

static SOURCE: OnceLock<TraceSource> = OnceLock::new();

/// Install the trace source once per process: from then on every
/// [`NewMessage`](crate::NewMessage) built in a span with a context carries it as its
/// `traceparent` header (unless one is given explicitly). Returns `false` when a source was
/// already installed (the first one stays).
///
/// ```
/// use outboxkit_core::{set_trace_source, Traceparent};
///
/// // With OpenTelemetry, read the current span's context here instead.
/// fn current() -> Option<Traceparent> {
///     Traceparent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").ok()
/// }
/// set_trace_source(current);
/// ```
pub fn set_trace_source(source: TraceSource) -> bool {
    SOURCE.set(source).is_ok()
}

/// The current trace context from the installed source, if any.
pub fn current_traceparent() -> Option<Traceparent> {
    SOURCE.get().and_then(|f| f())
}

fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        let rows = [
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                true,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
                true,
            ),
            // A future version with an extra field is read by its first four.
            (
                "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz",
                true,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz",
                false,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
                false,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                false,
            ),
            ("", false),
        ];
        for (s, ok) in rows {
            assert_eq!(Traceparent::parse(s).is_ok(), ok, "{s:?}");
        }
    }

    #[test]
    fn round_trips_through_headers() {
        let tp = Traceparent::new([7; 16], [9; 8], 1).expect("valid ids");
        let mut headers = BTreeMap::new();
        headers.insert(TRACEPARENT.to_owned(), tp.to_string());
        assert_eq!(Traceparent::from_headers(&headers), Some(tp));
        headers.insert(TRACEPARENT.to_owned(), "garbage".to_owned());
        assert_eq!(Traceparent::from_headers(&headers), None);
        assert!(Traceparent::new([0; 16], [9; 8], 1).is_none());
    }
}
