//! The delivery list: filters, endpoints by name and URL, relative times; it refreshes
//! itself until a filter is touched.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use outboxkit_core::{Delivery, DeliveryStatus, TenantId, Timestamp};
use serde::Deserialize;

use super::names::Names;
use super::time::when;
use super::{error_page, live_page, status_badge, User};
use crate::api::deliveries::page_of;
use crate::html::{enc, esc};
use crate::problem::Problem;
use crate::state::Serve;
use crate::views::DeliveryQuery;

/// A table of deliveries.
pub(super) fn delivery_rows(
    items: &[Delivery],
    names: &Names,
    now: Timestamp,
    tenant: &TenantId,
) -> String {
    let mut rows = String::new();
    for d in items {
        let last = d
            .last_outcome
            .as_ref()
            .map(|l| {
                format!(
                    "{}{} {}",
                    esc(l.outcome.as_str()),
                    l.status_code.map(|c| format!(" ({c})")).unwrap_or_default(),
                    when(now, l.at)
                )
            })
            .unwrap_or_default();
        let _ = write!(
            rows,
            "<tr><td class=\"mono\"><a class=\"delivery\" href=\"/console/deliveries/{id}?tenant={t}\">{id}</a></td>\
             <td>{topic}</td><td>{dest}</td><td>{status}</td>\
             <td>{attempts}</td><td>{last}</td><td>{created}</td></tr>",
            id = esc(&d.id.to_string()),
            t = enc(tenant.as_str()),
            topic = esc(d.topic.as_str()),
            dest = names.destination(&d.destination, tenant),
            status = status_badge(d.status.as_str()),
            attempts = d.attempts,
            created = when(now, d.created_at),
        );
    }
    format!(
        "<table><thead><tr><th>Delivery</th><th>Topic</th><th>Destination</th><th>Status</th>\
         <th>Attempts</th><th>Last outcome</th><th>Created</th></tr></thead><tbody>{rows}</tbody></table>"
    )
}

#[derive(Deserialize)]
struct ConsoleDeliveryQuery {
    #[allow(dead_code)]
    tenant: Option<String>,
    #[serde(flatten)]
    q: DeliveryQuery,
}

/// A form's query pairs as the API's delivery query (empty fields mean "any").
pub(super) fn parse_query(
    pairs: &[(String, String)],
    skip: &[&str],
) -> Result<DeliveryQuery, Problem> {
    let map: serde_json::Map<_, _> = pairs
        .iter()
        .filter(|(k, v)| !v.is_empty() && !skip.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let mut v = serde_json::Value::Object(map);
    // `limit` is a number.
    if let Some(l) = v.get("limit").and_then(|l| l.as_str()).map(str::to_owned) {
        v["limit"] = l.parse::<u32>().map_or(serde_json::Value::Null, Into::into);
    }
    serde_json::from_value::<ConsoleDeliveryQuery>(v)
        .map(|c| c.q)
        .map_err(|e| Problem::bad_request(e.to_string()))
}

/// The `<option>`s of the tenant's endpoints, by name and URL.
pub(super) async fn endpoint_options(s: &Serve, t: &TenantId, chosen: Option<&str>) -> String {
    let mut opts = String::from("<option value=\"\">any</option>");
    for e in s.inner.store.list_endpoints(t).await.unwrap_or_default() {
        let id = e.id.to_string();
        let sel = if chosen == Some(id.as_str()) {
            " selected"
        } else {
            ""
        };
        let name = if e.description.is_empty() {
            crate::views::display_url(&e.url)
        } else {
            format!("{} — {}", e.description, crate::views::display_url(&e.url))
        };
        let _ = write!(
            opts,
            "<option value=\"{}\"{sel}>{}</option>",
            esc(&id),
            esc(&name)
        );
    }
    opts
}

/// The `<option>`s of the statuses.
pub(super) fn status_options(chosen: Option<&str>) -> String {
    let mut opts = String::from("<option value=\"\">any</option>");
    for st in DeliveryStatus::ALL {
        let sel = if chosen == Some(st.as_str()) {
            " selected"
        } else {
            ""
        };
        let _ = write!(opts, "<option value=\"{0}\"{sel}>{0}</option>", st.as_str());
    }
    opts
}

pub(super) async fn deliveries(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(pairs): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let q = match parse_query(&pairs, &[]) {
        Ok(q) => q,
        Err(p) => return error_page(&user, &p),
    };
    let (f, page_req) = match page_of(&q) {
        Ok(x) => x,
        Err(p) => return error_page(&user, &p),
    };
    let t = &user.tenant;
    let p = match s.inner.store.list_deliveries(t, &f, page_req).await {
        Ok(p) => p,
        Err(e) => return error_page(&user, &e.into()),
    };
    let names = Names::load(&s, t).await;
    let mut body = format!(
        "<h1>Deliveries</h1><form class=\"filters\" method=\"get\" action=\"/console/deliveries\">\
         <input type=\"hidden\" name=\"tenant\" value=\"{t}\">\
         <label>Status<select name=\"status\" id=\"status\">{status}</select></label>\
         <label>Topic<input name=\"topic\" value=\"{topic}\"></label>\
         <label>Endpoint<select name=\"endpoint\" id=\"endpoint\">{endpoints}</select></label>\
         <label>Text in answers<input name=\"text\" value=\"{text}\"></label>\
         <button type=\"submit\" id=\"filter\">Filter</button></form>",
        t = esc(t.as_str()),
        status = status_options(q.status.as_deref()),
        topic = esc(q.topic.as_deref().unwrap_or("")),
        endpoints = endpoint_options(&s, t, q.endpoint.as_deref()).await,
        text = esc(q.text.as_deref().unwrap_or("")),
    );
    body.push_str(&delivery_rows(&p.items, &names, s.inner.now(), t));
    let kept: Vec<&(String, String)> = pairs
        .iter()
        .filter(|(k, v)| !v.is_empty() && k != "cursor" && k != "tenant")
        .collect();
    if let Some(next) = p.next {
        let mut link = format!("/console/deliveries?tenant={}", enc(t.as_str()));
        for (k, v) in &kept {
            let _ = write!(link, "&{}={}", enc(k), enc(v));
        }
        let _ = write!(
            body,
            "<p><a class=\"button secondary\" href=\"{}&cursor={}\">Next page</a></p>",
            esc(&link),
            enc(&next.encode())
        );
    }
    if !user.session.read_only && q.status.as_deref() == Some("dead") {
        let mut link = format!("/console/bulk?tenant={}", enc(t.as_str()));
        for (k, v) in kept.iter().filter(|(k, _)| k != "text" && k != "limit") {
            let _ = write!(link, "&{}={}", enc(k), enc(v));
        }
        let _ = write!(
            body,
            "<p><a class=\"button\" id=\"bulk-these\" href=\"{}\">Replay all that match…</a></p>",
            esc(&link)
        );
    }
    live_page(&user, "deliveries", "Deliveries", &body).into_response()
}
