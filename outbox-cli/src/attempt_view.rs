//! `deliveries show`: the attempt in full (DESIGN §18) as text and JSON — the payload once,
//! then per attempt its timings, address, request headers, response headers and body.
//!
//! Everything a receiver sent is escaped before it reaches the terminal: control
//! characters (C0 but newline and tab in bodies, DEL, C1) and bidirectional overrides are
//! written as `\u{…}`, so a hostile answer cannot move the cursor, recolour or hide text.

use std::fmt::Write as _;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use outboxkit_core::{Attempt, AttemptDetail, Message};
use serde_json::{json, Value};

/// `text` safe for a terminal: control and bidi characters escaped; newlines and tabs kept
/// when `multiline`, escaped otherwise (a header value stays on its line).
pub fn escape(text: &str, multiline: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let keep = multiline && (c == '\n' || c == '\t');
        if !keep && (c.is_control() || is_bidi(c)) {
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                _ => {
                    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The characters that reorder text on display (Trojan Source).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// Bytes for display: pretty JSON when they parse as JSON, else escaped text (bytes that
/// are not UTF-8 shown as U+FFFD, said on a first line; `--json` has the exact bytes).
fn bytes_text(bytes: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        if v.is_object() || v.is_array() {
            return escape(&serde_json::to_string_pretty(&v).unwrap_or_default(), true);
        }
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => escape(text, true),
        Err(_) => format!(
            "(not UTF-8: invalid bytes shown as U+FFFD; --json has the exact bytes)\n{}",
            escape(&String::from_utf8_lossy(bytes), true)
        ),
    }
}

fn indent(out: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "    {line}");
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The message's payload, once: its reference (size and SHA-256, as every attempt's) and
/// its bytes.
pub fn payload_text(message: &Message) -> String {
    let fp = outboxkit_core::model::PayloadFingerprint::of(&message.payload);
    let mut out = format!(
        "\npayload: {} B sha256:{} (message {}, every attempt carried these bytes)\n",
        fp.size, fp.sha256, message.id
    );
    if message.payload.is_empty() {
        out.push_str("    (empty)\n");
    } else {
        indent(&mut out, &bytes_text(&message.payload));
    }
    out
}

/// One attempt in full.
pub fn attempt_text(a: &Attempt) -> String {
    let r = &a.record;
    let mut out = format!(
        "\nattempt {} (run {}{}): {}{}   started {}   took {} ms\n",
        a.number,
        a.run,
        if a.probe { ", probe" } else { "" },
        r.outcome.as_str(),
        r.status_code.map_or(String::new(), |s| format!(" {s}")),
        r.started_at,
        a.duration().as_millis(),
    );
    let _ = writeln!(
        out,
        "  payload: {} B sha256:{}",
        a.payload.size, a.payload.sha256
    );
    let Some(d) = &r.detail else {
        if let Some(e) = &r.excerpt {
            let _ = writeln!(out, "  excerpt: {}", escape(e, false));
        }
        out.push_str("  (no request or response kept for this attempt)\n");
        return out;
    };
    let t = &d.timing;
    let _ = writeln!(
        out,
        "  timing: connect {}, first byte {}, total {}",
        t.connect.map_or("- (reused connection)".to_owned(), ms),
        t.first_byte.map_or("- (no answer)".to_owned(), ms),
        ms(t.total)
    );
    let _ = writeln!(
        out,
        "  remote address: {}",
        d.remote_addr
            .as_deref()
            .map_or("-".to_owned(), |a| escape(a, false))
    );
    headers(&mut out, "request headers", &d.request_headers);
    if d.response_headers.is_empty() && r.status_code.is_none() {
        out.push_str("  response: none");
        if let Some(e) = &r.excerpt {
            let _ = write!(out, " ({})", escape(e, false));
        }
        out.push('\n');
        return out;
    }
    headers(&mut out, "response headers", &d.response_headers);
    let _ = writeln!(
        out,
        "  response body: {} B{}",
        d.response_body.len(),
        if d.response_body_truncated {
            " (truncated at the cap: the receiver sent more)"
        } else {
            ""
        }
    );
    if !d.response_body.is_empty() {
        indent(&mut out, &bytes_text(&d.response_body));
    }
    out
}

fn headers(out: &mut String, title: &str, headers: &[(String, String)]) {
    let _ = writeln!(out, "  {title}:");
    if headers.is_empty() {
        out.push_str("    (none)\n");
    }
    for (k, v) in headers {
        let _ = writeln!(out, "    {}: {}", escape(k, false), escape(v, false));
    }
}

/// The payload in `--json`: its reference, its bytes as base64, and its text (invalid
/// UTF-8 replaced) or, when it is JSON, the JSON itself.
pub fn payload_json(message: &Message) -> Value {
    let fp = outboxkit_core::model::PayloadFingerprint::of(&message.payload);
    json!({
        "message_id": message.id.to_string(),
        "size": fp.size,
        "sha256": fp.sha256,
        "base64": B64.encode(&message.payload),
        "text": String::from_utf8_lossy(&message.payload),
        "json": serde_json::from_slice::<Value>(&message.payload).ok(),
    })
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn headers_json(h: &[(String, String)]) -> Value {
    h.iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect()
}

/// An attempt's detail in `--json` (`null` when none was kept).
pub fn detail_json(detail: Option<&AttemptDetail>) -> Value {
    let Some(d) = detail else {
        return Value::Null;
    };
    json!({
        "request_headers": headers_json(&d.request_headers),
        "response_headers": headers_json(&d.response_headers),
        "response_body_base64": B64.encode(&d.response_body),
        "response_body_text": d.response_text(),
        "response_body_size": d.response_body.len(),
        "response_body_truncated": d.response_body_truncated,
        "timing": {
            "connect_us": d.timing.connect.map(us),
            "first_byte_us": d.timing.first_byte.map(us),
            "total_us": us(d.timing.total),
        },
        "remote_addr": d.remote_addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(
            escape("ok\x1b[2J\u{9b}31m\u{202e}x\r\ny\tz\u{7f}", true),
            "ok\\u{1b}[2J\\u{9b}31m\\u{202e}x\\r\ny\tz\\u{7f}"
        );
        assert_eq!(escape("a\nb\tc", false), "a\\nb\\tc");
        assert_eq!(escape("plain é ✓", false), "plain é ✓");
    }

    #[test]
    fn bytes_are_shown_as_pretty_json_text_or_base64() {
        assert_eq!(bytes_text(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(bytes_text(b"busy\x1b[0m"), "busy\\u{1b}[0m");
        assert_eq!(
            bytes_text(&[b'o', b'k', 0xff, 0x00]),
            "(not UTF-8: invalid bytes shown as U+FFFD; --json has the exact bytes)\nok\u{fffd}\\u{0}"
        );
        // JSON strings with escapes are printed escaped for the terminal too.
        assert_eq!(bytes_text(br#"["\u001b[31m"]"#), "[\n  \"\\u001b[31m\"\n]");
    }
}
