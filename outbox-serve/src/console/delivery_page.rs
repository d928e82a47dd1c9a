//! One delivery: its state, the payload (pretty-printed when it is JSON, the raw bytes on
//! demand), and each attempt in full — the request headers as sent, the response status,
//! headers and body (marked when cut at the cap), the timings and the address. Everything
//! the receiver or the producer wrote is escaped. The page refreshes itself.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use outboxkit_core::{Attempt, AttemptDetail, Delivery, Timestamp};

use super::names::Names;
use super::time::{when, when_opt};
use super::{action_link, error_page, flash, live_page, outcome_badge, status_badge, User};
use crate::api::delivery_id;
use crate::html::{enc, esc};
use crate::problem::Problem;
use crate::state::Serve;

/// The payload as shown: JSON pretty-printed, anything else as (lossy) text.
fn pretty(bytes: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| String::from_utf8_lossy(bytes).into_owned())
}

fn headers_table(id: &str, h: &[(String, String)]) -> String {
    if h.is_empty() {
        return "<p>None.</p>".to_owned();
    }
    let mut rows = String::new();
    for (k, v) in h {
        let _ = write!(rows, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(v));
    }
    format!("<table class=\"headers\" id=\"{id}\"><tbody>{rows}</tbody></table>")
}

fn ms(d: std::time::Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn detail_html(n: u32, d: &AttemptDetail) -> String {
    let t = &d.timing;
    let body = if d.response_body.is_empty() {
        "<p>Empty.</p>".to_owned()
    } else {
        format!(
            "<pre class=\"body\" id=\"attempt-{n}-body\">{}</pre>{}",
            esc(&pretty(&d.response_body)),
            if d.response_body_truncated {
                format!(
                    "<p class=\"truncated\" id=\"attempt-{n}-truncated\">Truncated: the answer was longer; the first {} bytes are kept.</p>",
                    d.response_body.len()
                )
            } else {
                String::new()
            }
        )
    };
    format!(
        "<h4>Request headers</h4>{req}\
         <h4>Timing and address</h4><dl><dt>Connect</dt><dd>{connect}</dd><dt>First byte</dt><dd>{first}</dd>\
         <dt>Total</dt><dd>{total}</dd><dt>Remote address</dt><dd class=\"mono\">{addr}</dd></dl>\
         <h4>Response headers</h4>{resp}<h4>Response body</h4>{body}",
        req = headers_table(&format!("attempt-{n}-request-headers"), &d.request_headers),
        connect = t.connect.map_or_else(|| "reused connection".to_owned(), ms),
        first = t.first_byte.map_or_else(|| "—".to_owned(), ms),
        total = ms(t.total),
        addr = esc(d.remote_addr.as_deref().unwrap_or("—")),
        resp = headers_table(&format!("attempt-{n}-response-headers"), &d.response_headers),
    )
}

fn attempt_html(a: &Attempt, now: Timestamp) -> String {
    let r = &a.record;
    let code = r
        .status_code
        .map(|c| format!(" · HTTP <span class=\"code\">{c}</span>"))
        .unwrap_or_default();
    let full = match &r.detail {
        Some(d) => detail_html(a.number, d),
        None => r
            .excerpt
            .as_deref()
            .filter(|e| !e.is_empty())
            .map(|e| {
                format!(
                    "<h4>Response excerpt</h4><pre class=\"body\">{}</pre>",
                    esc(e)
                )
            })
            .unwrap_or_else(|| "<p>No request or response was kept for this attempt.</p>".into()),
    };
    format!(
        "<section class=\"attempt\" id=\"attempt-{n}\"><h3>#{n} (run {run}{probe}) · {outcome}{code} · {started} · {took}</h3>\
         <p class=\"small\">Payload sent: {size} bytes, SHA-256 <span class=\"mono\">{sha}</span></p>{full}</section>",
        n = a.number,
        run = a.run,
        probe = if a.probe { ", probe" } else { "" },
        outcome = outcome_badge(r.outcome.as_str()),
        started = when(now, r.started_at),
        took = ms(r.finished_at.duration_since(r.started_at)),
        size = a.payload.size,
        sha = esc(&a.payload.sha256),
    )
}

fn summary(d: &Delivery, names: &Names, now: Timestamp) -> String {
    format!(
        "<h1>Delivery <span class=\"mono\">{id}</span></h1><dl>\
         <dt>Status</dt><dd id=\"delivery-status\">{status}</dd>\
         <dt>Topic</dt><dd>{topic}</dd><dt>Destination</dt><dd>{dest}</dd>\
         <dt>Attempts</dt><dd>{attempts} (run {run})</dd><dt>Next attempt</dt><dd>{next}</dd>\
         <dt>Dead reason</dt><dd>{dead}</dd><dt>Created</dt><dd>{created}</dd><dt>Completed</dt><dd>{completed}</dd></dl>",
        id = esc(&d.id.to_string()),
        status = status_badge(d.status.as_str()),
        topic = esc(d.topic.as_str()),
        dest = names.destination(&d.destination, &d.tenant),
        attempts = d.attempts,
        run = d.run,
        next = when(now, d.next_attempt_at),
        dead = esc(&d.dead_reason.map_or_else(|| "—".to_owned(), |r| r.to_string())),
        created = when(now, d.created_at),
        completed = when_opt(now, d.completed_at),
    )
}

pub(super) async fn delivery(
    State(s): State<Serve>,
    user: User,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let t = &user.tenant;
    let store = &s.inner.store;
    let found = async {
        let id = delivery_id(&id)?;
        let d = store.get_delivery(t, id).await?;
        let attempts = store.attempts(t, id).await?;
        let message = store.get_message(t, d.message_id).await.ok();
        Ok::<_, Problem>((d, attempts, message))
    };
    let (d, attempts, message) = match found.await {
        Ok(x) => x,
        Err(p) => return error_page(&user, &p),
    };
    let now = s.inner.now();
    let names = Names::load(&s, t).await;
    let sid = d.id.to_string();
    let mut body = flash(&q);
    body.push_str(&summary(&d, &names, now));
    body.push_str("<div class=\"actions\">");
    match d.status.as_str() {
        "dead" => body.push_str(&action_link(&user, "replay", &sid, "Replay")),
        "pending" => {
            body.push_str(&action_link(&user, "retry", &sid, "Retry now"));
            body.push_str(&action_link(&user, "cancel", &sid, "Cancel"));
        }
        "held" => {
            body.push_str(&action_link(&user, "retry", &sid, "Retry now"));
            body.push_str(&action_link(&user, "reset", &sid, "Reset budget"));
            body.push_str(&action_link(&user, "cancel", &sid, "Cancel"));
        }
        _ => {}
    }
    body.push_str("</div><h2>Payload</h2>");
    match &message {
        Some(m) => {
            let _ = write!(
                body,
                "<pre class=\"body\" id=\"payload\">{}</pre><p><a href=\"/console/deliveries/{}/payload?tenant={}\" id=\"raw-payload\">Raw bytes ({} bytes, as a download)</a></p>",
                esc(&pretty(&m.payload)),
                enc(&sid),
                enc(t.as_str()),
                m.payload.len()
            );
        }
        None => body.push_str("<p>The message is gone (purged).</p>"),
    }
    body.push_str("<h2>Attempts</h2>");
    if attempts.is_empty() {
        body.push_str("<p>No attempt yet.</p>");
    } else {
        // The timeline, one line an attempt, then each attempt in full.
        body.push_str("<ol class=\"timeline\" id=\"timeline\">");
        for a in &attempts {
            let r = &a.record;
            let _ = write!(
                body,
                "<li><a href=\"#attempt-{n}\"><strong>#{n}</strong></a> (run {run}{probe}) {started} · {ms} ms · {outcome}{code}</li>",
                n = a.number,
                run = a.run,
                probe = if a.probe { ", probe" } else { "" },
                started = when(now, r.started_at),
                ms = r.finished_at.duration_since(r.started_at).as_millis(),
                outcome = outcome_badge(r.outcome.as_str()),
                code = r
                    .status_code
                    .map(|c| format!(" · HTTP <span class=\"code\">{c}</span>"))
                    .unwrap_or_default(),
            );
        }
        body.push_str("</ol>");
        for a in &attempts {
            body.push_str(&attempt_html(a, now));
        }
    }
    live_page(&user, "deliveries", "Delivery", &body).into_response()
}

/// The payload's exact bytes, as a plain-text download the browser never renders.
pub(super) async fn raw_payload(
    State(s): State<Serve>,
    user: User,
    Path(id): Path<String>,
) -> Response {
    let t = &user.tenant;
    let found = async {
        let id = delivery_id(&id)?;
        let d = s.inner.store.get_delivery(t, id).await?;
        let m = s.inner.store.get_message(t, d.message_id).await?;
        Ok::<_, Problem>((id, m.payload))
    };
    match found.await {
        Ok((id, bytes)) => {
            let mut res = bytes.into_response();
            let h = res.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            if let Ok(v) =
                HeaderValue::from_str(&format!("attachment; filename=\"payload-{id}.txt\""))
            {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
            res
        }
        Err(p) => error_page(&user, &p),
    }
}
