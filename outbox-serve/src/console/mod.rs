//! The web console: server-rendered pages under `/console`, no script at all. A session
//! starts from a token typed into the login form (an `HttpOnly`, `SameSite=Strict` cookie
//! holding a random session id; the token itself is never stored in the browser). Every
//! action goes through a confirmation page whose form carries the session's CSRF token.
//! Nothing secret is rendered: no signing secret, no token, no URL query string or
//! userinfo, no e-mail recipient.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use outboxkit_core::endpoint::EndpointStatus;
use outboxkit_core::store::{DeliveryFilter, PageRequest};
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::{DeliveryStatus, TenantId};
use serde::Deserialize;

use crate::api::deliveries::{detail, page_of};
use crate::html::{css, enc, esc};
use crate::problem::Problem;
use crate::state::Serve;
use crate::views::{display_url, DeliveryQuery, DeliveryView};

mod actions;
mod event_types;
mod session;

use session::csrf_ok;
pub(crate) use session::User;

const COOKIE: &str = "outbox_session";

pub(crate) fn routes() -> Router<Serve> {
    Router::new()
        .route("/console", get(overview))
        .route(
            "/console/login",
            get(session::login_page).post(session::login),
        )
        .route("/console/logout", post(session::logout))
        .route("/console/deliveries", get(deliveries))
        .route("/console/deliveries/{id}", get(delivery))
        .route("/console/endpoints", get(endpoints))
        .route("/console/event-types", get(event_types::event_types))
        .route("/console/confirm", get(actions::confirm))
        .route("/console/act", post(actions::act))
        .route("/console/static/console.css", get(css))
}

fn status_badge(s: &str) -> String {
    format!("<span class=\"status {0}\">{0}</span>", esc(s))
}

/// An attempt's outcome: green when it succeeded, red for every error class.
fn outcome_badge(s: &str) -> String {
    let class = if s == "succeeded" {
        "succeeded"
    } else {
        "failed"
    };
    format!("<span class=\"status {class}\">{}</span>", esc(s))
}

/// The page frame.
fn page(user: Option<(&User, &str)>, title: &str, body: &str) -> Html<String> {
    let nav = match user {
        Some((u, here)) => {
            let t = enc(u.tenant.as_str());
            let link = |path: &str, name: &str, key: &str| {
                let class = if key == here { " class=\"here\"" } else { "" };
                format!("<a href=\"{path}?tenant={t}\"{class}>{name}</a>")
            };
            format!(
                "<header><strong>outbox</strong>{}{}{}{}<span class=\"who\">tenant {} · {}{}</span>\
                 <form method=\"post\" action=\"/console/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                 <button type=\"submit\">Log out</button></form></header>",
                link("/console", "Overview", "overview"),
                link("/console/deliveries", "Deliveries", "deliveries"),
                link("/console/endpoints", "Endpoints", "endpoints"),
                link("/console/event-types", "Event types", "event-types"),
                esc(u.tenant.as_str()),
                match &u.session.scope {
                    TokenScope::Admin => "admin token",
                    TokenScope::Tenant(_) => "tenant token",
                },
                if u.session.read_only { ", read-only" } else { "" },
                esc(&u.session.csrf),
            )
        }
        None => "<header><strong>outbox</strong></header>".to_owned(),
    };
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · outbox</title><link rel=\"stylesheet\" href=\"/console/static/console.css\"></head>\
         <body>{nav}<main>{body}</main></body></html>",
        esc(title)
    ))
}

fn error_page(user: &User, p: &Problem) -> Response {
    let body = format!(
        "<div class=\"error\">{} — {}</div><p><a href=\"/console?tenant={}\">Back to the overview</a></p>",
        esc(&p.title),
        esc(p.detail.as_deref().unwrap_or("")),
        enc(user.tenant.as_str())
    );
    (p.status_code(), page(Some((user, "")), &p.title, &body)).into_response()
}

fn delivery_rows(items: &[DeliveryView], tenant: &TenantId) -> String {
    let mut rows = String::new();
    for d in items {
        let last = d
            .last_outcome
            .as_ref()
            .map(|l| {
                format!(
                    "{}{}",
                    esc(&l.outcome),
                    l.status_code.map(|c| format!(" ({c})")).unwrap_or_default()
                )
            })
            .unwrap_or_default();
        let _ = write!(
            rows,
            "<tr><td class=\"mono\"><a class=\"delivery\" href=\"/console/deliveries/{id}?tenant={t}\">{id}</a></td>\
             <td>{topic}</td><td>{kind} <span class=\"mono\">{target}</span></td><td>{status}</td>\
             <td>{attempts}</td><td>{last}</td><td>{created}</td></tr>",
            id = esc(&d.id),
            t = enc(tenant.as_str()),
            topic = esc(&d.topic),
            kind = esc(&d.destination.kind),
            target = esc(d.destination.target.as_deref().unwrap_or("")),
            status = status_badge(&d.status),
            attempts = d.attempts,
            created = esc(&d.created_at),
        );
    }
    format!(
        "<table><thead><tr><th>Delivery</th><th>Topic</th><th>Destination</th><th>Status</th>\
         <th>Attempts</th><th>Last outcome</th><th>Created</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

async fn overview(State(s): State<Serve>, user: User) -> Response {
    let store = &s.inner.store;
    let t = &user.tenant;
    let stats = match store.tenant_stats(t, None).await {
        Ok(st) => st,
        Err(e) => return error_page(&user, &e.into()),
    };
    let mut body = format!(
        "<h1>Overview of {}</h1><div class=\"cards\">",
        esc(t.as_str())
    );
    for st in DeliveryStatus::ALL {
        let _ = write!(
            body,
            "<div class=\"card\">{}<b id=\"count-{}\">{}</b></div>",
            status_badge(st.as_str()),
            st.as_str(),
            stats.count(st)
        );
    }
    body.push_str("</div>");
    // The oldest due delivery per channel: per endpoint, and over the whole tenant.
    body.push_str("<h2>Oldest due</h2><table><thead><tr><th>Channel</th><th>Oldest due since</th></tr></thead><tbody>");
    let _ = write!(
        body,
        "<tr><td>all channels</td><td>{}</td></tr>",
        stats
            .oldest_due_at
            .map(|x| esc(&x.to_rfc3339()))
            .unwrap_or_else(|| "nothing due".into())
    );
    if let Ok(eps) = store.list_endpoints(t).await {
        for e in eps.iter().take(50) {
            if let Ok(es) = store.tenant_stats(t, Some(e.id)).await {
                if let Some(at) = es.oldest_due_at {
                    let _ = write!(
                        body,
                        "<tr><td>webhook {}</td><td>{}</td></tr>",
                        esc(&display_url(&e.url)),
                        esc(&at.to_rfc3339())
                    );
                }
            }
        }
    }
    body.push_str("</tbody></table>");
    let dead = DeliveryFilter {
        status: Some(DeliveryStatus::Dead),
        ..DeliveryFilter::default()
    };
    match store
        .list_deliveries(t, &dead, PageRequest::first(10))
        .await
    {
        Ok(p) => {
            let items: Vec<DeliveryView> = p.items.iter().map(DeliveryView::from).collect();
            let _ = write!(
                body,
                "<h2>Recent dead letters</h2>{}",
                if items.is_empty() {
                    "<p>None.</p>".to_owned()
                } else {
                    delivery_rows(&items, t)
                }
            );
        }
        Err(e) => return error_page(&user, &e.into()),
    }
    if matches!(user.session.scope, TokenScope::Admin) {
        if let Ok(tenants) = store.tenants().await {
            body.push_str("<h2>Tenants</h2><p>");
            for ts in tenants {
                let _ = write!(
                    body,
                    "<a href=\"/console?tenant={}\">{}</a> ({}) · ",
                    enc(ts.tenant.as_str()),
                    esc(ts.tenant.as_str()),
                    ts.stats.total()
                );
            }
            body.push_str("</p>");
        }
    }
    page(Some((&user, "overview")), "Overview", &body).into_response()
}

#[derive(Deserialize)]
struct ConsoleDeliveryQuery {
    tenant: Option<String>,
    #[serde(flatten)]
    q: DeliveryQuery,
}

async fn deliveries(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(q): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    // Empty form fields mean "any".
    let pairs: Vec<(String, String)> = q.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    let parsed: Result<ConsoleDeliveryQuery, _> = serde_json::to_value(
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect::<serde_json::Map<_, _>>(),
    )
    .and_then(|mut v| {
        // `limit` is a number.
        if let Some(l) = v.get("limit").and_then(|l| l.as_str()).map(str::to_owned) {
            v["limit"] = l.parse::<u32>().map_or(serde_json::Value::Null, Into::into);
        }
        serde_json::from_value(v)
    });
    let cq = match parsed {
        Ok(c) => c,
        Err(e) => return error_page(&user, &Problem::bad_request(e.to_string())),
    };
    let _ = cq.tenant;
    let q = cq.q;
    let (f, page_req) = match page_of(&q) {
        Ok(x) => x,
        Err(p) => return error_page(&user, &p),
    };
    let t = &user.tenant;
    let p = match s.inner.store.list_deliveries(t, &f, page_req).await {
        Ok(p) => p,
        Err(e) => return error_page(&user, &e.into()),
    };
    let mut opts = String::from("<option value=\"\">any</option>");
    for st in DeliveryStatus::ALL {
        let sel = if q.status.as_deref() == Some(st.as_str()) {
            " selected"
        } else {
            ""
        };
        let _ = write!(opts, "<option value=\"{0}\"{sel}>{0}</option>", st.as_str());
    }
    let mut body = format!(
        "<h1>Deliveries</h1><form class=\"filters\" method=\"get\" action=\"/console/deliveries\">\
         <input type=\"hidden\" name=\"tenant\" value=\"{t}\">\
         <label>Status<select name=\"status\" id=\"status\">{opts}</select></label>\
         <label>Topic<input name=\"topic\" value=\"{topic}\"></label>\
         <label>Endpoint<input name=\"endpoint\" value=\"{endpoint}\" class=\"mono\"></label>\
         <label>Text in answers<input name=\"text\" value=\"{text}\"></label>\
         <button type=\"submit\" id=\"filter\">Filter</button></form>",
        t = esc(t.as_str()),
        topic = esc(q.topic.as_deref().unwrap_or("")),
        endpoint = esc(q.endpoint.as_deref().unwrap_or("")),
        text = esc(q.text.as_deref().unwrap_or("")),
    );
    let items: Vec<DeliveryView> = p.items.iter().map(DeliveryView::from).collect();
    body.push_str(&delivery_rows(&items, t));
    if let Some(next) = p.next {
        let mut link = format!("/console/deliveries?tenant={}", enc(t.as_str()));
        for (k, v) in pairs.iter().filter(|(k, _)| k != "cursor" && k != "tenant") {
            let _ = write!(link, "&{}={}", enc(k), enc(v));
        }
        let _ = write!(
            body,
            "<p><a class=\"button secondary\" href=\"{}&cursor={}\">Next page</a></p>",
            esc(&link),
            enc(&next.encode())
        );
    }
    page(Some((&user, "deliveries")), "Deliveries", &body).into_response()
}

fn action_link(user: &User, action: &str, target: &str, label: &str) -> String {
    if user.session.read_only {
        return String::new();
    }
    format!(
        "<a class=\"button\" id=\"action-{action}\" href=\"/console/confirm?tenant={}&action={action}&target={}\">{}</a>",
        enc(user.tenant.as_str()),
        enc(target),
        esc(label)
    )
}

async fn delivery(
    State(s): State<Serve>,
    user: User,
    Path(id): Path<String>,
    axum::extract::Query(flash): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let d = match detail(&s, &user.tenant, &id).await {
        Ok(d) => d,
        Err(p) => return error_page(&user, &p),
    };
    let done = flash.iter().find(|(k, _)| k == "done").map(|(_, v)| v);
    let v = &d.delivery;
    let mut body = String::new();
    if let Some(done) = done {
        let _ = write!(
            body,
            "<div class=\"flash\" id=\"flash\">{}</div>",
            esc(done)
        );
    }
    let _ = write!(
        body,
        "<h1>Delivery <span class=\"mono\">{id}</span></h1><dl>\
         <dt>Status</dt><dd id=\"delivery-status\">{status}</dd>\
         <dt>Topic</dt><dd>{topic}</dd><dt>Destination</dt><dd>{kind} <span class=\"mono\">{target}</span></dd>\
         <dt>Attempts</dt><dd>{attempts} (run {run})</dd><dt>Next attempt</dt><dd>{next}</dd>\
         <dt>Dead reason</dt><dd>{dead}</dd><dt>Created</dt><dd>{created}</dd><dt>Completed</dt><dd>{completed}</dd></dl>",
        id = esc(&v.id),
        status = status_badge(&v.status),
        topic = esc(&v.topic),
        kind = esc(&v.destination.kind),
        target = esc(v.destination.target.as_deref().unwrap_or("")),
        attempts = v.attempts,
        run = v.run,
        next = esc(&v.next_attempt_at),
        dead = esc(v.dead_reason.as_deref().unwrap_or("—")),
        created = esc(&v.created_at),
        completed = esc(v.completed_at.as_deref().unwrap_or("—")),
    );
    body.push_str("<div class=\"actions\">");
    match v.status.as_str() {
        "dead" => body.push_str(&action_link(&user, "replay", &v.id, "Replay")),
        "pending" => {
            body.push_str(&action_link(&user, "retry", &v.id, "Retry now"));
            body.push_str(&action_link(&user, "cancel", &v.id, "Cancel"));
        }
        "held" => {
            body.push_str(&action_link(&user, "retry", &v.id, "Retry now"));
            body.push_str(&action_link(&user, "reset", &v.id, "Reset budget"));
            body.push_str(&action_link(&user, "cancel", &v.id, "Cancel"));
        }
        _ => {}
    }
    body.push_str("</div><h2>Attempt timeline</h2>");
    if d.attempts.is_empty() {
        body.push_str("<p>No attempt yet.</p>");
    } else {
        body.push_str("<ol class=\"timeline\" id=\"timeline\">");
        for a in &d.attempts {
            let _ = write!(
                body,
                "<li><strong>#{n}</strong> (run {run}{probe}) {started} · {ms} ms · {outcome}{code}{excerpt}</li>",
                n = a.number,
                run = a.run,
                probe = if a.probe { ", probe" } else { "" },
                started = esc(&a.started_at),
                ms = a.duration_ms,
                outcome = outcome_badge(&a.outcome),
                code = a
                    .status_code
                    .map(|c| format!(" · HTTP <span class=\"code\">{c}</span>"))
                    .unwrap_or_default(),
                excerpt = a
                    .excerpt
                    .as_deref()
                    .filter(|e| !e.is_empty())
                    .map(|e| format!("<pre>{}</pre>", esc(e)))
                    .unwrap_or_default(),
            );
        }
        body.push_str("</ol>");
    }
    page(Some((&user, "deliveries")), "Delivery", &body).into_response()
}

/// An endpoint's custom headers, one a line, escaped; a secret value is masked.
fn header_cells(e: &outboxkit_core::Endpoint) -> String {
    if e.headers.is_empty() {
        return "—".into();
    }
    e.headers
        .iter()
        .map(|h| match h.value.plain() {
            Some(v) => format!("{}: {}", esc(&h.name), esc(v)),
            None => format!("{}: ******** <em>(secret)</em>", esc(&h.name)),
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

async fn endpoints(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(flash): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let t = &user.tenant;
    let eps = match s.inner.store.list_endpoints(t).await {
        Ok(e) => e,
        Err(e) => return error_page(&user, &e.into()),
    };
    let mut body = String::new();
    if let Some((_, done)) = flash.iter().find(|(k, _)| k == "done") {
        let _ = write!(
            body,
            "<div class=\"flash\" id=\"flash\">{}</div>",
            esc(done)
        );
    }
    body.push_str(
        "<h1>Endpoints</h1><table><thead><tr><th>Endpoint</th><th>URL</th><th>Filter</th>\
         <th>Headers</th><th>Status</th><th>Last delivery</th><th>Actions</th></tr></thead><tbody>",
    );
    for e in &eps {
        let id = e.id.to_string();
        let last = e
            .last_delivery
            .as_ref()
            .map(|l| {
                format!(
                    "{}{} at {}",
                    outcome_badge(l.outcome.as_str()),
                    l.status_code.map(|c| format!(" ({c})")).unwrap_or_default(),
                    esc(&l.at.to_rfc3339())
                )
            })
            .unwrap_or_else(|| "—".into());
        let mut actions = String::new();
        match e.status {
            EndpointStatus::Active => actions.push_str(&action_link(&user, "pause", &id, "Pause")),
            _ => actions.push_str(&action_link(&user, "resume", &id, "Resume")),
        }
        actions.push_str(&action_link(&user, "release-held", &id, "Release held"));
        actions.push_str(&action_link(&user, "rotate", &id, "Rotate secret"));
        if e.previous_secret.is_some() {
            actions.push_str(&action_link(
                &user,
                "finish-rotation",
                &id,
                "Finish rotation",
            ));
        }
        let _ = write!(
            body,
            "<tr><td class=\"mono\"><a href=\"/console/deliveries?tenant={t}&endpoint={id}\">{id}</a><br>{desc}</td>\
             <td class=\"mono\">{url}</td><td class=\"mono\">{filter}</td><td class=\"mono\">{headers}</td><td>{status}{fifo}</td><td>{last}</td>\
             <td><div class=\"actions\">{actions}</div></td></tr>",
            t = enc(t.as_str()),
            desc = esc(&e.description),
            url = esc(&display_url(&e.url)),
            filter = esc(&e.filter.to_string()),
            headers = header_cells(e),
            status = status_badge(e.status.as_str()),
            fifo = if e.fifo { "<br>strict FIFO" } else { "" },
        );
    }
    body.push_str("</tbody></table>");
    page(Some((&user, "endpoints")), "Endpoints", &body).into_response()
}
