//! Console sessions: the login form (refused from another origin), the session cookie,
//! the signed-in [`User`] extractor, the CSRF check and logout.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::{ConsoleSession, TenantId};
use serde::Deserialize;

use super::{error_page, page, COOKIE};
use crate::auth::{authenticate, client_ip};
use crate::html::esc;
use crate::problem::Problem;
use crate::state::{actor_of, Audit, Serve, Session};

/// A signed-in console user and the tenant the page is about.
pub(crate) struct User {
    /// SHA-256 of the session cookie's value (what the store keeps).
    pub(super) session_hash: [u8; 32],
    pub(super) session: Session,
    pub(super) tenant: TenantId,
    /// `token:<id> (<label>)`, for the audit log.
    pub(super) actor: String,
    /// The client's address.
    pub(super) ip: Option<std::net::IpAddr>,
}

fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn query_tenant(parts: &Parts) -> Option<String> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
        .ok()?
        .0
        .into_iter()
        .find(|(k, _)| k == "tenant")
        .map(|(_, v)| v)
}

/// Where an unauthenticated console request goes.
pub(crate) struct ToLogin(Response);

impl IntoResponse for ToLogin {
    fn into_response(self) -> Response {
        self.0
    }
}

impl FromRequestParts<Serve> for User {
    type Rejection = ToLogin;

    async fn from_request_parts(parts: &mut Parts, state: &Serve) -> Result<Self, ToLogin> {
        let login = || ToLogin(Redirect::to("/console/login").into_response());
        let inner = &state.inner;
        let id = cookie_value(&parts.headers, COOKIE).ok_or_else(login)?;
        let now = inner.now();
        let hash = ConsoleSession::hash_of(id);
        let stored = match inner.console.get_session(&hash, now).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(login()),
            Err(e) => {
                tracing::warn!(error = %e, "could not read a console session");
                return Err(login());
            }
        };
        let session = Session::of(stored);
        // A revoked token ends its sessions at once.
        let actor = match inner.tokens.get_token(session.token).await {
            Ok(t) if t.revoked_at.is_none() => actor_of(t.id, &t.label),
            _ => {
                if let Err(e) = inner.console.delete_token_sessions(session.token).await {
                    tracing::warn!(error = %e, "could not end a revoked token's sessions");
                }
                return Err(login());
            }
        };
        let tenant = match &session.scope {
            TokenScope::Tenant(t) => t.clone(),
            TokenScope::Admin => query_tenant(parts)
                .and_then(|t| TenantId::new(t).ok())
                .unwrap_or_else(|| TenantId::new("default").expect("a valid tenant name")),
        };
        Ok(User {
            session_hash: hash,
            session,
            tenant,
            actor,
            ip: client_ip(parts),
        })
    }
}

pub(super) async fn login_page() -> Html<String> {
    page(
        None,
        "Log in",
        "<div class=\"login\"><h1>Log in</h1>\
         <form method=\"post\" action=\"/console/login\">\
         <label for=\"token\">API token (<span class=\"mono\">outbox tokens create</span> makes one)</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required>\
         <button type=\"submit\" id=\"login\">Log in</button></form></div>",
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoginForm {
    token: String,
}

/// Whether a login POST comes from this console's own page, not a page of another origin
/// (login CSRF: it would log the browser into the attacker's tenant). Browsers send
/// `Sec-Fetch-Site` and `Origin` on such a POST; a client that sends neither (curl, a
/// script) is not a browser that can be tricked.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    match text("sec-fetch-site") {
        Some("same-origin") | Some("none") => return true,
        Some(_) => return false,
        None => {}
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(host) = text("host") else {
        return false;
    };
    origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .is_some_and(|(scheme, authority)| {
            matches!(scheme, "http" | "https") && authority.eq_ignore_ascii_case(host)
        })
}

pub(super) async fn login(
    State(s): State<Serve>,
    parts: Parts,
    Form(f): Form<LoginForm>,
) -> Response {
    let inner = &s.inner;
    if !same_origin(&parts.headers) {
        let p = Problem::forbidden("log in from the console's own page");
        let body = format!(
            "<div class=\"login\"><div class=\"error\">{} — {}</div><a class=\"button\" href=\"/console/login\">Log in here</a></div>",
            esc(&p.title),
            esc(p.detail.as_deref().unwrap_or(""))
        );
        return (p.status_code(), page(None, "Log in", &body)).into_response();
    }
    let ip = client_ip(&parts);
    let token = match authenticate(inner, ip, f.token.trim()).await {
        Ok(t) => t,
        Err(p) => {
            let body = format!(
                "<div class=\"login\"><div class=\"error\">{}</div><a class=\"button\" href=\"/console/login\">Try again</a></div>",
                esc(&p.title)
            );
            return (p.status_code(), page(None, "Log in", &body)).into_response();
        }
    };
    if !token.access.may_read() {
        let body = "<div class=\"login\"><div class=\"error\">This token may only enqueue \
                    messages; the console needs a token that can read</div><a class=\"button\" \
                    href=\"/console/login\">Try again</a></div>";
        return (
            axum::http::StatusCode::FORBIDDEN,
            page(None, "Log in", body),
        )
            .into_response();
    }
    let id = inner.random_hex();
    let now = inner.login_time();
    let session = ConsoleSession {
        id_hash: ConsoleSession::hash_of(&id),
        token: token.id,
        scope: token.scope.clone(),
        read_only: !token.access.may_change(),
        csrf: inner.random_hex(),
        created_at: now,
        expires_at: now.saturating_add(inner.config.session_ttl),
    };
    if let Err(e) = inner.console.put_session(&session, now).await {
        let p = Problem::from(e);
        let body = format!(
            "<div class=\"login\"><div class=\"error\">{}</div><a class=\"button\" href=\"/console/login\">Try again</a></div>",
            esc(&p.title)
        );
        return (p.status_code(), page(None, "Log in", &body)).into_response();
    }
    inner
        .audit(Audit {
            tenant: token.scope.tenant().cloned(),
            actor: &actor_of(token.id, &token.label),
            action: "session.login",
            target: "console",
            detail: String::new(),
            source: ip,
        })
        .await;
    let secure = if inner.config.secure_cookies {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        inner.config.session_ttl.as_secs()
    );
    let mut res = Redirect::to("/console").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

pub(super) fn csrf_ok(user: &User, given: &str) -> bool {
    let a = user.session.csrf.as_bytes();
    let b = given.as_bytes();
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CsrfForm {
    csrf: String,
}

pub(super) async fn logout(
    State(s): State<Serve>,
    user: User,
    Form(f): Form<CsrfForm>,
) -> Response {
    if !csrf_ok(&user, &f.csrf) {
        return error_page(
            &user,
            &Problem::forbidden("the form has expired; reload the page"),
        );
    }
    if let Err(e) = s.inner.console.delete_session(&user.session_hash).await {
        return error_page(&user, &Problem::from(e));
    }
    s.inner
        .audit(Audit {
            tenant: user.session.scope.tenant().cloned(),
            actor: &user.actor,
            action: "session.logout",
            target: "console",
            detail: String::new(),
            source: user.ip,
        })
        .await;
    let mut res = Redirect::to("/console/login").into_response();
    res.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "outbox_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    res
}
