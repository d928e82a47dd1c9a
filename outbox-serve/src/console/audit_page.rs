//! The audit log: who did what, when and from where, newest first, 50 a page. A tenant's
//! token sees its tenant's entries; an admin token sees every entry (admin-scope ones
//! included). It refreshes itself.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use outboxkit_core::audit::AuditCursor;
use outboxkit_core::tokens::TokenScope;

use super::time::when;
use super::{console_store, error_page, live_page, User};
use crate::html::{enc, esc};
use crate::problem::Problem;
use crate::state::Serve;

const PAGE: u32 = 50;

pub(super) async fn audit(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(pairs): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let store = match console_store(&s) {
        Ok(c) => c,
        Err(p) => return error_page(&user, &p),
    };
    let cursor = match pairs.iter().find(|(k, _)| k == "cursor") {
        Some((_, c)) => match AuditCursor::decode(c) {
            Ok(c) => Some(c),
            Err(e) => return error_page(&user, &Problem::from(e).field("cursor")),
        },
        None => None,
    };
    let admin = matches!(user.session.scope, TokenScope::Admin);
    let tenant = (!admin).then_some(&user.tenant);
    let p = match store.list_audit(tenant, PAGE, cursor).await {
        Ok(p) => p,
        Err(e) => return error_page(&user, &e.into()),
    };
    let now = s.inner.now();
    let mut body = format!(
        "<h1>Audit log</h1><p>{}</p>",
        if admin {
            "Every state-changing action, of every tenant.".to_owned()
        } else {
            format!(
                "Every state-changing action on tenant {}.",
                esc(user.tenant.as_str())
            )
        }
    );
    if p.items.is_empty() {
        body.push_str("<p>Nothing recorded yet.</p>");
    } else {
        body.push_str(
            "<table id=\"audit\"><thead><tr><th>When</th><th>Tenant</th><th>Who</th><th>What</th>\
             <th>On what</th><th>Detail</th><th>From</th></tr></thead><tbody>",
        );
        for e in &p.items {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td>\
                 <td class=\"mono\">{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
                when(now, e.at),
                esc(e.tenant.as_ref().map_or("—", |t| t.as_str())),
                esc(&e.actor),
                esc(&e.action),
                esc(&e.target),
                esc(&e.detail),
                esc(e.source.as_deref().unwrap_or("—")),
            );
        }
        body.push_str("</tbody></table>");
    }
    if let Some(next) = p.next {
        let _ = write!(
            body,
            "<p><a class=\"button secondary\" href=\"/console/audit?tenant={}&cursor={}\">Older entries</a></p>",
            enc(user.tenant.as_str()),
            enc(&next.encode())
        );
    }
    live_page(&user, "audit", "Audit log", &body).into_response()
}
