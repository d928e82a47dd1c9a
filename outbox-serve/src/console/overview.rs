//! The overview: counts by status, the tenant's activity chart, the oldest due delivery per
//! channel, recent dead letters, and (for an admin) the tenants. It refreshes itself.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use outboxkit_core::store::{DeliveryFilter, PageRequest};
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::DeliveryStatus;

use super::charts::{activity, here, hours_of, outcome_chart, range_links};
use super::list::delivery_rows;
use super::names::Names;
use super::time::when_opt;
use super::{error_page, live_page, status_badge, User};
use crate::html::{enc, esc};
use crate::state::Serve;

pub(super) async fn overview(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(pairs): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let hours = match hours_of(&pairs) {
        Ok(h) => h,
        Err(p) => return error_page(&user, &p),
    };
    let store = &s.inner.store;
    let t = &user.tenant;
    let now = s.inner.now();
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
    body.push_str("</div><h2>Activity</h2>");
    body.push_str(&range_links(&here("/console", t), hours));
    match activity(&s, t, None, hours).await {
        Ok((q, b)) => body.push_str(&outcome_chart("activity", "Attempts by outcome", &q, &b)),
        Err(p) => {
            let _ = write!(
                body,
                "<p class=\"error\">{}</p>",
                esc(p.detail.as_deref().unwrap_or(&p.title))
            );
        }
    }
    // The oldest due delivery per channel: per endpoint, and over the whole tenant.
    body.push_str("<h2>Oldest due</h2><table><thead><tr><th>Channel</th><th>Oldest due since</th></tr></thead><tbody>");
    let _ = write!(
        body,
        "<tr><td>all channels</td><td>{}</td></tr>",
        stats
            .oldest_due_at
            .map(|x| when_opt(now, Some(x)))
            .unwrap_or_else(|| "nothing due".into())
    );
    let eps = store.list_endpoints(t).await.unwrap_or_default();
    let names = Names::of(&eps);
    for e in eps.iter().take(50) {
        if let Ok(es) = store.tenant_stats(t, Some(e.id)).await {
            if let Some(at) = es.oldest_due_at {
                let _ = write!(
                    body,
                    "<tr><td>webhook {}</td><td>{}</td></tr>",
                    names.endpoint(e.id, t),
                    when_opt(now, Some(at))
                );
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
            let _ = write!(
                body,
                "<h2>Recent dead letters</h2>{}",
                if p.items.is_empty() {
                    "<p>None.</p>".to_owned()
                } else {
                    delivery_rows(&p.items, &names, now, t)
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
    live_page(&user, "overview", "Overview", &body).into_response()
}
