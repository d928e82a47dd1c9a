//! An endpoint's custom headers: static headers its owner sets (an API key the receiver
//! expects, a routing header), sent with every webhook request to it. A value marked
//! secret is stored sealed through the [`crate::SecretVault`], bound to the tenant, the
//! endpoint and the header's name ([`crate::SecretContext::endpoint_header`]).
//!
//! The rules ([`check_header_name`], [`check_header_value`], [`check_headers`]) are pure;
//! [`crate::EndpointAdmin`] applies them and seals before anything is written, and every
//! store checks the list it is about to write again.

use std::fmt;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sealed::SealedSecret;
use crate::signing::HeaderNames;

/// The most custom headers an endpoint has.
pub const MAX_HEADERS: usize = 20;
/// The longest header name, in bytes.
pub const MAX_HEADER_NAME: usize = 128;
/// The longest header value, in bytes (before sealing).
pub const MAX_HEADER_VALUE: usize = 4096;

/// Names HTTP or the connection owns (hop-by-hop and framing), refused as custom headers.
/// `proxy-*` and `content-*` are refused as prefixes.
const FORBIDDEN: [&str; 8] = [
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// Names the product sets itself on every webhook request. `webhook-*` is refused as a
/// prefix, and so are the names of a configured header prefix.
const PRODUCT: [&str; 3] = ["user-agent", "traceparent", "tracestate"];

/// A custom header's value: plain text, or sealed by the vault.
#[derive(Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Stored and shown as it is.
    Plain(String),
    /// Stored sealed, opened at send time, never shown.
    Secret(SealedSecret),
}

impl fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderValue::Plain(v) => write!(f, "Plain({} bytes)", v.len()),
            HeaderValue::Secret(s) => write!(f, "Secret({} bytes)", s.0.len()),
        }
    }
}

impl HeaderValue {
    /// Whether it is sealed.
    pub fn is_secret(&self) -> bool {
        matches!(self, HeaderValue::Secret(_))
    }

    /// The plain text, `None` when secret.
    pub fn plain(&self) -> Option<&str> {
        match self {
            HeaderValue::Plain(v) => Some(v),
            HeaderValue::Secret(_) => None,
        }
    }
}

/// One custom header of an endpoint. Its name is stored lowercase (HTTP names are
/// case-insensitive, and that is how they go on the wire). Debug output never shows the
/// value, plain or secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredHeader", into = "StoredHeader")]
pub struct CustomHeader {
    /// The lowercase name.
    pub name: String,
    /// The value.
    pub value: HeaderValue,
}

impl fmt::Debug for CustomHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.value.is_secret() {
            "secret"
        } else {
            "plain"
        };
        write!(f, "CustomHeader({}: <{kind}>)", self.name)
    }
}

/// The stored form: `{"name", "value"}` or `{"name", "sealed": base64}`.
#[derive(Serialize, Deserialize)]
struct StoredHeader {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<String>,
}

impl From<CustomHeader> for StoredHeader {
    fn from(h: CustomHeader) -> Self {
        match h.value {
            HeaderValue::Plain(v) => StoredHeader {
                name: h.name,
                value: Some(v),
                sealed: None,
            },
            HeaderValue::Secret(s) => StoredHeader {
                name: h.name,
                value: None,
                sealed: Some(B64.encode(&s.0)),
            },
        }
    }
}

impl TryFrom<StoredHeader> for CustomHeader {
    type Error = Error;
    fn try_from(s: StoredHeader) -> Result<Self> {
        let value = match (s.value, s.sealed) {
            (Some(v), None) => HeaderValue::Plain(v),
            (None, Some(b)) => {
                HeaderValue::Secret(SealedSecret(B64.decode(b).map_err(|_| {
                    Error::invalid_input("headers", "a sealed value is not base64")
                })?))
            }
            _ => {
                return Err(Error::invalid_input(
                    "headers",
                    "a header has either a value or a sealed value",
                ))
            }
        };
        Ok(CustomHeader {
            name: s.name,
            value,
        })
    }
}

/// Encode a header list as stores keep it (JSON text; `[]` when empty).
pub fn encode_headers(headers: &[CustomHeader]) -> String {
    serde_json::to_string(headers).unwrap_or_else(|_| "[]".to_owned())
}

/// Decode [`encode_headers`] (empty text reads as no headers: rows written before headers
/// existed).
pub fn decode_headers(text: &str) -> Result<Vec<CustomHeader>> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(text)
        .map_err(|_| Error::invalid_input("headers", "the stored header list is not valid"))
}

/// A header as an operator gives it, before it is checked and sealed.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HeaderInput {
    /// The name (any case).
    pub name: String,
    /// The value, in clear.
    pub value: String,
    /// Seal the value.
    pub secret: bool,
}

impl fmt::Debug for HeaderInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HeaderInput({}, secret: {})", self.name, self.secret)
    }
}

impl HeaderInput {
    /// Parse `Name: value` (as `curl -H` takes it; spaces around the value are trimmed).
    pub fn parse(text: &str, secret: bool) -> Result<Self> {
        let Some((name, value)) = text.split_once(':') else {
            return Err(Error::invalid_input(
                "headers",
                "a header is written `Name: value`",
            ));
        };
        Ok(HeaderInput {
            name: name.trim().to_owned(),
            value: value.trim_matches([' ', '\t']).to_owned(),
            secret,
        })
    }
}

/// The name as shown in an error: at most 64 characters, control characters escaped.
fn shown(name: &str) -> String {
    let cut: String = name.chars().take(64).collect();
    cut.escape_debug().to_string()
}

/// Whether `name` is an RFC 9110 token (`tchar`s, at least one).
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// Check a header name and return it lowercase: an RFC 9110 token of at most
/// [`MAX_HEADER_NAME`] bytes that neither HTTP (`host`, `content-length`, hop-by-hop
/// names, `proxy-*`, `content-*`, …) nor the product (`webhook-*`, the names under the
/// configured prefix in `names`, `user-agent`, `traceparent`, `tracestate`) sets.
pub fn check_header_name(name: &str, names: &HeaderNames) -> Result<String> {
    if name.len() > MAX_HEADER_NAME {
        return Err(Error::invalid_input(
            "headers",
            format!(
                "header `{}…` is longer than {MAX_HEADER_NAME} bytes",
                shown(name)
            ),
        ));
    }
    if !is_token(name) {
        return Err(Error::invalid_input(
            "headers",
            format!(
                "header `{}` is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~)",
                shown(name)
            ),
        ));
    }
    let lower = name.to_ascii_lowercase();
    if FORBIDDEN.contains(&lower.as_str())
        || lower.starts_with("proxy-")
        || lower.starts_with("content-")
    {
        return Err(Error::invalid_input(
            "headers",
            format!("header `{lower}` is set by HTTP itself and cannot be a custom header"),
        ));
    }
    let ours = [&names.id, &names.timestamp, &names.signature];
    if PRODUCT.contains(&lower.as_str())
        || lower.starts_with("webhook-")
        || ours.iter().any(|n| **n == lower)
    {
        return Err(Error::invalid_input(
            "headers",
            format!(
                "header `{lower}` is set by outbox on every request and cannot be a custom header"
            ),
        ));
    }
    Ok(lower)
}

/// Check a header value (of the header `name`): 1 to [`MAX_HEADER_VALUE`] bytes of visible
/// ASCII, spaces and tabs, neither starting nor ending with whitespace (no control
/// characters, CR or LF, no non-ASCII text).
pub fn check_header_value(name: &str, value: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid_input(
            "headers",
            format!("header `{name}`: {why}"),
        ))
    };
    if value.is_empty() {
        return bad("the value is empty");
    }
    if value.len() > MAX_HEADER_VALUE {
        return bad(&format!(
            "the value is longer than {MAX_HEADER_VALUE} bytes"
        ));
    }
    if !value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return bad("the value holds a control character, CR, LF or non-ASCII text");
    }
    if value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']) {
        return bad("the value starts or ends with whitespace");
    }
    Ok(())
}

/// Check a list of stored headers: at most [`MAX_HEADERS`], every name valid and
/// lowercase, no name twice, every plain value valid (a sealed value was checked before
/// it was sealed).
pub fn check_headers(headers: &[CustomHeader]) -> Result<()> {
    if headers.len() > MAX_HEADERS {
        return Err(Error::invalid_input(
            "headers",
            format!("an endpoint has at most {MAX_HEADERS} custom headers"),
        ));
    }
    let names = HeaderNames::default();
    for (i, h) in headers.iter().enumerate() {
        let lower = check_header_name(&h.name, &names)?;
        if lower != h.name {
            return Err(Error::invalid_input(
                "headers",
                format!("header `{}` must be stored lowercase", shown(&h.name)),
            ));
        }
        if headers[..i].iter().any(|o| o.name == h.name) {
            return Err(Error::invalid_input(
                "headers",
                format!("header `{lower}` is given twice"),
            ));
        }
        if let HeaderValue::Plain(v) = &h.value {
            check_header_value(&lower, v)?;
        }
    }
    Ok(())
}

/// Check operator input (names against `names`, values, duplicates in any case, the
/// count) and return each header's lowercase name, in order. Nothing is sealed here.
pub fn check_inputs(inputs: &[HeaderInput], names: &HeaderNames) -> Result<Vec<String>> {
    if inputs.len() > MAX_HEADERS {
        return Err(Error::invalid_input(
            "headers",
            format!("an endpoint has at most {MAX_HEADERS} custom headers"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(inputs.len());
    for i in inputs {
        let lower = check_header_name(i.name.trim(), names)?;
        check_header_value(&lower, &i.value)?;
        if out.contains(&lower) {
            return Err(Error::invalid_input(
                "headers",
                format!("header `{lower}` is given twice"),
            ));
        }
        out.push(lower);
    }
    Ok(out)
}

/// `headers` with `set` applied (a header of the same name replaced in place, a new one
/// appended) and the names in `remove` taken out.
pub fn merge_headers(headers: &mut Vec<CustomHeader>, set: &[CustomHeader], remove: &[String]) {
    headers.retain(|h| !remove.iter().any(|r| r.eq_ignore_ascii_case(&h.name)));
    for s in set {
        match headers.iter_mut().find(|h| h.name == s.name) {
            Some(h) => *h = s.clone(),
            None => headers.push(s.clone()),
        }
    }
}

#[cfg(test)]
#[path = "endpoint_headers_tests.rs"]
mod tests;
