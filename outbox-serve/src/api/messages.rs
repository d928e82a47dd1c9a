//! `POST /v1/tenants/{tenant}/messages`: enqueue over HTTP, for a service that is not written
//! in Rust and does not share the outbox's database (one that does calls the SQL function
//! `<schema>.enqueue(...)` in its own transaction instead).
//!
//! The message goes through the store's `enqueue`, so it is checked and fanned out exactly as
//! `enqueue` from Rust does: the same validation and limits (a refusal is 400 naming the
//! field, and nothing is written), the same idempotency by `(tenant, topic, key)` — a repeat
//! with the same `Idempotency-Key` answers 200 with the first message's id — and the same
//! wake-up of the relays.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use std::time::Duration;

use outboxkit_core::{
    parse_delay, Limits, NewMessage, SendAt, Timestamp, Traceparent, TRACEPARENT,
};

use super::Body;
use crate::auth::{Enqueuer, Scoped};
use crate::problem::{ApiResult, Problem};
use crate::state::Serve;
use crate::views::{CancelledView, EnqueuedView, NewMessageBody};

/// The header that carries the idempotency key.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Enqueue one message for the tenant: written with one delivery per matching consumer,
/// endpoint and e-mail recipient, in one transaction.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/messages", tag = "messages",
    params(("tenant" = String, Path, description = "The tenant"),
        ("Idempotency-Key" = Option<String>, Header, description = "A second request with the tenant, topic and key of an earlier one writes nothing and answers 200 with the earlier message's id"),
        ("traceparent" = Option<String>, Header, description = "A W3C trace context stored with the message, unless its headers carry one")),
    request_body = NewMessageBody,
    responses((status = 201, description = "Written", body = EnqueuedView),
        (status = 200, description = "A duplicate of an earlier message: nothing written", body = EnqueuedView),
        (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, description = "A read-only token", body = Problem), (status = 404, body = Problem),
        (status = 413, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn enqueue(
    State(s): State<Serve>,
    who: Enqueuer,
    headers: HeaderMap,
    Body(b): Body<NewMessageBody>,
) -> ApiResult<(StatusCode, Json<EnqueuedView>)> {
    let now = s.inner.clock.now();
    let message = message(&who, &headers, b, now)?;
    let r = s.inner.store.enqueue(message).await?;
    let status = if r.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(EnqueuedView {
            message_id: r.message_id.to_string(),
            deliveries: r.deliveries,
            duplicate: r.duplicate,
        }),
    ))
}

/// Cancel every pending or held delivery of a message in one step; those in flight or
/// finished are counted as skipped (an unknown message, or another tenant's, is 404).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/messages/{id}/cancel", tag = "messages",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The message id")),
    responses((status = 200, body = CancelledView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn cancel(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<CancelledView>> {
    let id = outboxkit_core::MessageId::parse(&id)
        .map_err(|_| Problem::bad_request("the message id is not a UUIDv7").field("message_id"))?;
    let r = s.inner.operator().cancel_message(&scope.tenant, id).await?;
    Ok(Json(CancelledView {
        cancelled: r.cancelled,
        skipped: r.skipped,
    }))
}

/// The message a request asks for; the store validates every field again before writing.
fn message(
    who: &Enqueuer,
    headers: &HeaderMap,
    b: NewMessageBody,
    now: Timestamp,
) -> ApiResult<NewMessage> {
    let payload = b.payload.get().as_bytes().to_vec();
    let mut m = NewMessage::raw(b.topic, payload).tenant(who.tenant.as_str());
    if let Some(v) = headers.get(IDEMPOTENCY_KEY) {
        let key = v.to_str().map_err(|_| {
            Problem::bad_request("the Idempotency-Key header must be visible ASCII")
                .field("idempotency_key")
        })?;
        m = m.idempotency_key(key);
    }
    if let Some(k) = b.ordering_key {
        m = m.ordering_key(k);
    }
    let delay = b.delay.as_ref().map(delay).transpose()?;
    let at = b.available_at.as_ref().map(available_at).transpose()?;
    let send_at = SendAt::from_parts("delay", delay, at)?;
    // The past is refused here; the maximum delay is the store's to check (its own limits).
    let unbounded = Limits {
        max_delay: Duration::MAX,
        ..Limits::default()
    };
    send_at.check(&unbounded, now, "delay", "available_at")?;
    m = send_at.apply(m);
    let own_trace = b.headers.contains_key(TRACEPARENT);
    for (name, value) in b.headers {
        m = m.header(name, value);
    }
    // The caller's trace context (W3C: one that does not parse is ignored, not refused).
    let request_trace = headers
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Traceparent::parse(v).ok());
    if let (false, Some(tp)) = (own_trace, request_trace) {
        m = m.traceparent(&tp);
    }
    for e in b.email {
        m = m.email(e);
    }
    Ok(m)
}

/// `delay`: a duration text (`10m`, `1h30m`, `500ms`; bare digits are seconds) or a whole
/// number of seconds.
fn delay(v: &serde_json::Value) -> ApiResult<Duration> {
    match v {
        serde_json::Value::String(s) => Ok(parse_delay("delay", s)?),
        serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(secs), _) => Ok(Duration::from_secs(secs)),
            (None, Some(_)) => {
                Err(Problem::bad_request("a delay cannot be negative").field("delay"))
            }
            _ => Err(Problem::bad_request("must be a whole number of seconds").field("delay")),
        },
        _ => Err(Problem::bad_request(
            "must be a duration such as \"10m\" or a whole number of seconds",
        )
        .field("delay")),
    }
}

/// `available_at`: RFC 3339 text or Unix milliseconds (a number or its digits).
fn available_at(v: &serde_json::Value) -> ApiResult<Timestamp> {
    let bad = || {
        Problem::bad_request("must be an RFC 3339 time or Unix milliseconds").field("available_at")
    };
    match v {
        serde_json::Value::String(s) => super::millis("available_at", s),
        serde_json::Value::Number(n) => n
            .as_i64()
            .and_then(|ms| Timestamp::from_unix_millis(ms).ok())
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}
