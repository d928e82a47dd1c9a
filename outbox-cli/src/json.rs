//! The `--json` documents: stable field names, times as RFC 3339 strings (UTC, milliseconds),
//! durations as integer milliseconds in fields ending `_ms`. The README lists every field.

use outboxkit_core::{Attempt, Delivery, Destination, Endpoint, EndpointUrl, Stats, Timestamp};
use serde_json::{json, Value};

/// A time as RFC 3339.
pub fn time(t: Timestamp) -> Value {
    Value::String(t.to_rfc3339())
}

/// An optional time as RFC 3339 or `null`.
pub fn opt_time(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, time)
}

/// A delivery. The e-mail recipient is never printed (`target` is `null` for e-mail).
pub fn delivery(d: &Delivery) -> Value {
    let target = match &d.destination {
        Destination::Email(_) => Value::Null,
        other => Value::String(other.target()),
    };
    json!({
        "id": d.id.to_string(),
        "message_id": d.message_id.to_string(),
        "tenant": d.tenant.to_string(),
        "topic": d.topic.to_string(),
        "ordering_key": d.ordering_key.as_ref().map(ToString::to_string),
        "destination": { "kind": d.destination.kind().as_str(), "target": target },
        "status": d.status.as_str(),
        "attempts": d.attempts,
        "snoozes": d.snoozes,
        "next_attempt_at": time(d.next_attempt_at),
        "lease_until": opt_time(d.lease_until),
        "last_outcome": d.last_outcome.as_ref().map(|l| json!({
            "outcome": l.outcome.as_str(),
            "status_code": l.status_code,
            "excerpt": l.excerpt,
            "at": time(l.at),
        })),
        "dead_reason": d.dead_reason.map(|r| r.as_str()),
        "created_at": time(d.created_at),
        "updated_at": time(d.updated_at),
        "completed_at": opt_time(d.completed_at),
    })
}

/// One ledger entry, with the attempt in full (`detail`, `null` when none was kept) and
/// the reference to its payload.
pub fn attempt(a: &Attempt) -> Value {
    json!({
        "number": a.number,
        "run": a.run,
        "probe": a.probe,
        "started_at": time(a.record.started_at),
        "finished_at": time(a.record.finished_at),
        "duration_ms": u64::try_from(a.duration().as_millis()).unwrap_or(u64::MAX),
        "outcome": a.record.outcome.as_str(),
        "status_code": a.record.status_code,
        "excerpt": a.record.excerpt,
        "payload": { "size": a.payload.size, "sha256": a.payload.sha256 },
        "detail": crate::attempt_view::detail_json(a.record.detail.as_deref()),
    })
}

/// An endpoint; `show_url` reveals the URL's query string and userinfo.
pub fn endpoint(e: &Endpoint, show_url: bool) -> Value {
    json!({
        "id": e.id.to_string(),
        "tenant": e.tenant.to_string(),
        "url": display_url(&e.url, show_url),
        "status": e.status.as_str(),
        "disabled_reason": e.status.reason().map(|r| r.as_str()),
        "filter": e.filter.to_string(),
        "body_format": e.body_format.as_str(),
        "description": e.description,
        "rate_limit": e.rate_limit,
        "fifo": e.fifo,
        "rotation_in_progress": e.previous_secret.is_some(),
        // Names and plain values; a secret value is `null`.
        "headers": crate::endpoint_headers::headers_json(e),
        // Not a live state: the circuit a relay starting now would adopt from the last
        // delivery (a running relay keeps its own; its report and observer show it).
        "circuit_at_start": outboxkit_dispatch::CircuitState::on_start(e.last_delivery.as_ref()).as_str(),
        "last_delivery": e.last_delivery.as_ref().map(|l| json!({
            "outcome": l.outcome.as_str(),
            "status_code": l.status_code,
            "at": time(l.at),
        })),
        "created_at": time(e.created_at),
        "updated_at": time(e.updated_at),
    })
}

/// Queue statistics.
pub fn stats(s: &Stats) -> Value {
    json!({
        "pending": s.pending,
        "processing": s.processing,
        "sending": s.sending,
        "succeeded": s.succeeded,
        "held": s.held,
        "dead": s.dead,
        "total": s.total(),
        "oldest_due_at": opt_time(s.oldest_due_at),
        "oldest_due_age_ms": s.oldest_due_age.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    })
}

/// The URL as shown to operators: without userinfo, and with the query string replaced by
/// `?…` (tokens live there) unless `show` is set.
pub fn display_url(url: &EndpointUrl, show: bool) -> String {
    if show {
        return url.as_str().to_owned();
    }
    let u = url.url();
    let mut out = format!("{}://", u.scheme());
    if let Some(host) = u.host_str() {
        out.push_str(host);
    }
    if let Some(port) = u.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(u.path());
    if u.query().is_some() {
        out.push_str("?…");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_hide_query_and_userinfo() {
        let u =
            EndpointUrl::parse("https://hooks.example.com:8443/in/abc?token=s3cr3t&x=1").unwrap();
        assert_eq!(
            display_url(&u, false),
            "https://hooks.example.com:8443/in/abc?…"
        );
        assert!(display_url(&u, true).contains("token=s3cr3t"));
        let plain = EndpointUrl::parse("https://example.com/hook").unwrap();
        assert_eq!(display_url(&plain, false), "https://example.com/hook");
    }
}
