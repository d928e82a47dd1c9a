//! The endpoints: the list (name, URL, filter, headers, status, last delivery, actions) and
//! one endpoint's page with its activity, success rate and latency. Both refresh themselves.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use outboxkit_core::endpoint::EndpointStatus;
use outboxkit_core::{Endpoint, Timestamp};

use super::charts::{
    activity, here, hours_of, latency_chart, outcome_chart, range_links, success_rate_chart,
};
use super::time::when;
use super::{action_link, error_page, flash, live_page, outcome_badge, status_badge, User};
use crate::api::endpoint_id;
use crate::html::{enc, esc};
use crate::state::Serve;
use crate::views::display_url;

/// An endpoint's custom headers, one a line, escaped; a secret value is masked.
fn header_cells(e: &Endpoint) -> String {
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

fn last_delivery(e: &Endpoint, now: Timestamp) -> String {
    e.last_delivery
        .as_ref()
        .map(|l| {
            format!(
                "{}{} {}",
                outcome_badge(l.outcome.as_str()),
                l.status_code.map(|c| format!(" ({c})")).unwrap_or_default(),
                when(now, l.at)
            )
        })
        .unwrap_or_else(|| "—".into())
}

fn actions(user: &User, e: &Endpoint) -> String {
    let id = e.id.to_string();
    let mut actions = String::new();
    match e.status {
        EndpointStatus::Active => actions.push_str(&action_link(user, "pause", &id, "Pause")),
        _ => actions.push_str(&action_link(user, "resume", &id, "Resume")),
    }
    actions.push_str(&action_link(user, "release-held", &id, "Release held"));
    actions.push_str(&action_link(user, "rotate", &id, "Rotate secret"));
    if e.previous_secret.is_some() {
        actions.push_str(&action_link(
            user,
            "finish-rotation",
            &id,
            "Finish rotation",
        ));
    }
    actions
}

fn name(e: &Endpoint) -> String {
    if e.description.is_empty() {
        "(no description)".to_owned()
    } else {
        e.description.clone()
    }
}

pub(super) async fn endpoints(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(q): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let t = &user.tenant;
    let eps = match s.inner.store.list_endpoints(t).await {
        Ok(e) => e,
        Err(e) => return error_page(&user, &e.into()),
    };
    let now = s.inner.now();
    let mut body = flash(&q);
    body.push_str(
        "<h1>Endpoints</h1><table><thead><tr><th>Endpoint</th><th>URL</th><th>Filter</th>\
         <th>Headers</th><th>Status</th><th>Last delivery</th><th>Actions</th></tr></thead><tbody>",
    );
    for e in &eps {
        let id = e.id.to_string();
        let _ = write!(
            body,
            "<tr><td><a class=\"endpoint-name\" href=\"/console/endpoints/{id}?tenant={t}\" title=\"{id}\">{name}</a><br>\
             <a class=\"small\" href=\"/console/deliveries?tenant={t}&endpoint={id}\">deliveries</a></td>\
             <td class=\"mono\">{url}</td><td class=\"mono\">{filter}</td><td class=\"mono\">{headers}</td><td>{status}{fifo}</td><td>{last}</td>\
             <td><div class=\"actions\">{actions}</div></td></tr>",
            t = enc(t.as_str()),
            name = esc(&name(e)),
            url = esc(&display_url(&e.url)),
            filter = esc(&e.filter.to_string()),
            headers = header_cells(e),
            status = status_badge(e.status.as_str()),
            fifo = if e.fifo { "<br>strict FIFO" } else { "" },
            last = last_delivery(e, now),
            actions = actions(&user, e),
        );
    }
    body.push_str("</tbody></table>");
    live_page(&user, "endpoints", "Endpoints", &body).into_response()
}

pub(super) async fn endpoint(
    State(s): State<Serve>,
    user: User,
    Path(id): Path<String>,
    axum::extract::Query(q): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    let hours = match hours_of(&q) {
        Ok(h) => h,
        Err(p) => return error_page(&user, &p),
    };
    let t = &user.tenant;
    let e = match endpoint_id(&id) {
        Ok(id) => match s.inner.store.get_endpoint(t, id).await {
            Ok(e) => e,
            Err(e) => return error_page(&user, &e.into()),
        },
        Err(p) => return error_page(&user, &p),
    };
    let now = s.inner.now();
    let sid = e.id.to_string();
    let mut body = format!(
        "<h1>{name} <span class=\"mono url\">{url}</span></h1><dl>\
         <dt>Id</dt><dd class=\"mono\">{sid}</dd><dt>Status</dt><dd>{status}</dd>\
         <dt>Filter</dt><dd class=\"mono\">{filter}</dd><dt>Headers</dt><dd class=\"mono\">{headers}</dd>\
         <dt>Last delivery</dt><dd>{last}</dd><dt>Created</dt><dd>{created}</dd></dl>\
         <div class=\"actions\">{actions}<a class=\"button secondary\" href=\"/console/deliveries?tenant={t}&endpoint={sid}\">Its deliveries</a></div>\
         <h2>Activity</h2>",
        name = esc(&name(&e)),
        url = esc(&display_url(&e.url)),
        status = status_badge(e.status.as_str()),
        filter = esc(&e.filter.to_string()),
        headers = header_cells(&e),
        last = last_delivery(&e, now),
        created = when(now, e.created_at),
        actions = actions(&user, &e),
        t = enc(t.as_str()),
    );
    body.push_str(&range_links(
        &here(&format!("/console/endpoints/{sid}"), t),
        hours,
    ));
    match activity(&s, t, Some(e.id), hours).await {
        Ok((q, b)) => {
            let _ = write!(
                body,
                "<div class=\"charts\">{}{}{}</div>",
                outcome_chart("endpoint-activity", "Attempts by outcome", &q, &b),
                success_rate_chart("endpoint-success", &q, &b),
                latency_chart("endpoint-latency", &q, &b)
            );
        }
        Err(p) => {
            let _ = write!(
                body,
                "<p class=\"error\">{}</p>",
                esc(p.detail.as_deref().unwrap_or(&p.title))
            );
        }
    }
    live_page(&user, "endpoints", &name(&e), &body).into_response()
}
