//! The web console: server-rendered pages under `/console`; one small same-origin script
//! (`console.js`) only refreshes the read-only pages (it is never needed). A session
//! starts from a token typed into the login form (an `HttpOnly`, `SameSite=Strict` cookie
//! holding a random session id; the token itself is never stored in the browser). Every
//! action goes through a confirmation page whose form carries the session's CSRF token.
//! Nothing secret is rendered: no signing secret, no token, no URL query string or
//! userinfo, no e-mail recipient.

use std::sync::Arc;

use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::DynConsoleStore;

use crate::html::{css, enc, esc, js};
use crate::problem::Problem;
use crate::state::Serve;

mod actions;
mod audit_page;
mod bulk;
mod charts;
mod delivery_page;
mod endpoints_page;
mod event_types;
mod list;
mod names;
mod overview;
mod session;
mod time;

use session::csrf_ok;
pub(crate) use session::User;

const COOKIE: &str = "outbox_session";

pub(crate) fn routes() -> Router<Serve> {
    Router::new()
        .route("/console", get(overview::overview))
        .route(
            "/console/login",
            get(session::login_page).post(session::login),
        )
        .route("/console/logout", post(session::logout))
        .route("/console/deliveries", get(list::deliveries))
        .route("/console/deliveries/{id}", get(delivery_page::delivery))
        .route(
            "/console/deliveries/{id}/payload",
            get(delivery_page::raw_payload),
        )
        .route("/console/endpoints", get(endpoints_page::endpoints))
        .route("/console/endpoints/{id}", get(endpoints_page::endpoint))
        .route("/console/bulk", get(bulk::form).post(bulk::replay))
        .route("/console/audit", get(audit_page::audit))
        .route("/console/event-types", get(event_types::event_types))
        .route("/console/confirm", get(actions::confirm))
        .route("/console/act", post(actions::act))
        .route("/console/static/console.css", get(css))
        .route("/console/static/console.js", get(js))
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

/// Seconds between refreshes of a page that refreshes itself.
const REFRESH_SECS: u32 = 15;

/// The page frame.
fn page(user: Option<(&User, &str)>, title: &str, body: &str) -> Html<String> {
    frame(user, title, body, false)
}

/// The frame of a read-only page that refreshes itself (see `console.js`).
fn live_page(user: &User, here: &str, title: &str, body: &str) -> Html<String> {
    frame(Some((user, here)), title, body, true)
}

fn frame(user: Option<(&User, &str)>, title: &str, body: &str, live: bool) -> Html<String> {
    let nav = match user {
        Some((u, here)) => {
            let t = enc(u.tenant.as_str());
            let link = |path: &str, name: &str, key: &str| {
                let class = if key == here { " class=\"here\"" } else { "" };
                format!("<a href=\"{path}?tenant={t}\"{class}>{name}</a>")
            };
            format!(
                "<header><strong>outbox</strong>{}{}{}{}{}{}<span class=\"who\">tenant {} · {}{}</span>{}\
                 <form method=\"post\" action=\"/console/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                 <button type=\"submit\">Log out</button></form></header>",
                link("/console", "Overview", "overview"),
                link("/console/deliveries", "Deliveries", "deliveries"),
                link("/console/endpoints", "Endpoints", "endpoints"),
                link("/console/event-types", "Event types", "event-types"),
                link("/console/bulk", "Bulk replay", "bulk"),
                link("/console/audit", "Audit log", "audit"),
                esc(u.tenant.as_str()),
                match &u.session.scope {
                    TokenScope::Admin => "admin token",
                    TokenScope::Tenant(_) => "tenant token",
                },
                if u.session.read_only { ", read-only" } else { "" },
                if live {
                    "<button type=\"button\" class=\"refresh\" id=\"refresh-toggle\" aria-pressed=\"false\">Pause refresh</button>"
                } else {
                    ""
                },
                esc(&u.session.csrf),
            )
        }
        None => "<header><strong>outbox</strong></header>".to_owned(),
    };
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · outbox</title><link rel=\"stylesheet\" href=\"/console/static/console.css\">\
         <script src=\"/console/static/console.js\" defer></script></head>\
         <body>{nav}<main{live}>{body}</main></body></html>",
        esc(title),
        live = if live {
            format!(" data-refresh=\"{REFRESH_SECS}\"")
        } else {
            String::new()
        }
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

/// The store of the audit log and the activity, or why a page cannot show them.
fn console_store(s: &Serve) -> Result<Arc<DynConsoleStore>, Problem> {
    Ok(s.inner.console.clone())
}

/// A flash message after an action (`?done=…`).
fn flash(q: &[(String, String)]) -> String {
    q.iter()
        .find(|(k, _)| k == "done")
        .map(|(_, v)| format!("<div class=\"flash\" id=\"flash\">{}</div>", esc(v)))
        .unwrap_or_default()
}
