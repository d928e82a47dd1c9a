//! Bulk replay by filter: a form with the delivery list's filters (dead deliveries by
//! endpoint, topic and time), a dry-run page that counts and lists what matches and
//! changes nothing, and a confirmation (CSRF-protected, refused to read-only sessions) that
//! replays exactly the deliveries the dry run listed — not whatever matches by then — and
//! writes one audit entry.

use std::fmt::Write as _;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::Extensions;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use outboxkit_core::audit::AuditEntry;
use outboxkit_core::store::PageRequest;
use outboxkit_core::{DeliveryId, DeliveryStatus, ErrorKind, TenantId};
use serde::Deserialize;

use super::list::{endpoint_options, parse_query};
use super::{console_store, error_page, flash, page, User};
use crate::api::deliveries::filter;
use crate::html::{enc, esc};
use crate::problem::Problem;
use crate::state::Serve;
use crate::views::BulkFilter;

/// The most deliveries one console bulk replay takes (the form carries their ids).
pub(crate) const MAX_BULK: usize = 500;

/// The filter's fields as the form and the audit entry show them.
fn describe(f: &BulkFilter) -> String {
    let mut out = String::from("status=dead");
    for (k, v) in [
        ("endpoint", &f.endpoint),
        ("topic", &f.topic),
        ("since", &f.since),
        ("until", &f.until),
    ] {
        if let Some(v) = v {
            let _ = write!(out, " {k}={v}");
        }
    }
    out
}

/// The dead deliveries matching `f`, newest first, at most [`MAX_BULK`]; whether more match.
async fn matching(
    s: &Serve,
    t: &TenantId,
    f: &BulkFilter,
) -> Result<(Vec<DeliveryId>, bool), Problem> {
    let mut df = filter(f, None)?;
    df.status = Some(DeliveryStatus::Dead);
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = s
            .inner
            .store
            .list_deliveries(t, &df, PageRequest { limit: 200, cursor })
            .await?;
        for d in page
            .items
            .iter()
            .filter(|d| d.status == DeliveryStatus::Dead)
        {
            if out.len() == MAX_BULK {
                return Ok((out, true));
            }
            out.push(d.id);
        }
        match page.next {
            Some(c) => cursor = Some(c),
            None => return Ok((out, false)),
        }
    }
}

pub(super) async fn form(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(pairs): axum::extract::Query<Vec<(String, String)>>,
) -> Response {
    if user.session.read_only {
        return error_page(&user, &Problem::forbidden("this token is read-only"));
    }
    let q = match parse_query(&pairs, &["preview", "done"]) {
        Ok(q) => q,
        Err(p) => return error_page(&user, &p),
    };
    if q.status.as_deref().is_some_and(|st| st != "dead") {
        return error_page(
            &user,
            &Problem::bad_request("bulk replay applies to dead deliveries only").field("status"),
        );
    }
    let f = BulkFilter {
        status: Some("dead".into()),
        endpoint: q.endpoint.clone(),
        kind: None,
        topic: q.topic.clone(),
        since: q.since.clone(),
        until: q.until.clone(),
    };
    let t = &user.tenant;
    let mut body = flash(&pairs);
    let _ = write!(
        body,
        "<h1>Bulk replay</h1><p>Replay the dead deliveries that match, each with a fresh budget, due now. \
         The dry run counts them and changes nothing.</p>\
         <form class=\"filters\" method=\"get\" action=\"/console/bulk\">\
         <input type=\"hidden\" name=\"tenant\" value=\"{tv}\"><input type=\"hidden\" name=\"status\" value=\"dead\">\
         <input type=\"hidden\" name=\"preview\" value=\"1\">\
         <label>Endpoint<select name=\"endpoint\" id=\"bulk-endpoint\">{eps}</select></label>\
         <label>Topic<input name=\"topic\" id=\"bulk-topic\" value=\"{topic}\"></label>\
         <label>Since (RFC 3339)<input name=\"since\" id=\"bulk-since\" value=\"{since}\" placeholder=\"2026-01-01T00:00:00Z\"></label>\
         <label>Until<input name=\"until\" id=\"bulk-until\" value=\"{until}\"></label>\
         <button type=\"submit\" id=\"dry-run\">Dry run</button></form>",
        tv = esc(t.as_str()),
        eps = endpoint_options(&s, t, q.endpoint.as_deref()).await,
        topic = esc(q.topic.as_deref().unwrap_or("")),
        since = esc(q.since.as_deref().unwrap_or("")),
        until = esc(q.until.as_deref().unwrap_or("")),
    );
    if pairs.iter().any(|(k, v)| k == "preview" && v == "1") {
        let (ids, more) = match matching(&s, t, &f).await {
            Ok(x) => x,
            Err(p) => return error_page(&user, &p),
        };
        let what = describe(&f);
        let _ = write!(
            body,
            "<h2>Dry run</h2><p><span class=\"count\" id=\"bulk-count\">{n}</span> dead deliveries match \
             <span class=\"mono\">{what}</span>{more}.</p>",
            n = ids.len(),
            what = esc(&what),
            more = if more {
                format!(" (the newest {MAX_BULK}; replay them, then run it again for the rest)")
            } else {
                String::new()
            },
        );
        if !ids.is_empty() {
            body.push_str("<ul class=\"matched\" id=\"bulk-matched\">");
            for id in ids.iter().take(40) {
                let _ = write!(
                    body,
                    "<li><a href=\"/console/deliveries/{id}?tenant={}\">{id}</a></li>",
                    enc(t.as_str())
                );
            }
            if ids.len() > 40 {
                let _ = write!(body, "<li>… and {} more</li>", ids.len() - 40);
            }
            let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
            let _ = write!(
                body,
                "</ul><form method=\"post\" action=\"/console/bulk\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <input type=\"hidden\" name=\"tenant\" value=\"{tv}\">\
                 <input type=\"hidden\" name=\"filter\" value=\"{what}\">\
                 <input type=\"hidden\" name=\"ids\" value=\"{ids}\">\
                 <button type=\"submit\" class=\"danger\" id=\"confirm-bulk\">Replay these {n}</button></form>",
                csrf = esc(&user.session.csrf),
                tv = esc(t.as_str()),
                what = esc(&what),
                ids = esc(&list.join(",")),
                n = ids.len(),
            );
        }
    }
    page(Some((&user, "bulk")), "Bulk replay", &body).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkForm {
    csrf: String,
    tenant: String,
    filter: String,
    ids: String,
}

pub(super) async fn replay(
    State(s): State<Serve>,
    mut user: User,
    ext: Extensions,
    Form(f): Form<BulkForm>,
) -> Response {
    if let Some(refused) = super::actions::refused_change(&mut user, &f.csrf, &f.tenant) {
        return refused;
    }
    // Every id is checked before anything changes.
    let ids: Result<Vec<DeliveryId>, _> = f
        .ids
        .split(',')
        .filter(|x| !x.is_empty())
        .map(crate::api::delivery_id)
        .collect();
    let ids = match ids {
        Ok(ids) if !ids.is_empty() && ids.len() <= MAX_BULK => ids,
        Ok(_) => {
            return error_page(
                &user,
                &Problem::bad_request(format!("give 1 to {MAX_BULK} deliveries")).field("ids"),
            )
        }
        Err(p) => return error_page(&user, &p),
    };
    let t = &user.tenant;
    let op = s.inner.operator();
    let (mut replayed, mut skipped) = (0u64, 0u64);
    for id in &ids {
        match op.replay(t, *id).await {
            Ok(()) => replayed += 1,
            // Replayed or removed by someone else since the dry run: counted, not an error.
            Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => {
                skipped += 1;
            }
            Err(e) => return error_page(&user, &e.into()),
        }
    }
    let detail = format!("{replayed} replayed, {skipped} skipped of {}", ids.len());
    if let Ok(store) = console_store(&s) {
        let source = ext
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip().to_string());
        let entry = AuditEntry::new(
            s.inner.now(),
            &*s.inner.entropy,
            Some(t.clone()),
            format!("token:{}", user.session.token),
            "delivery.bulk_replay",
            outboxkit_core::audit::clean(&f.filter, outboxkit_core::audit::MAX_AUDIT_FIELD),
        )
        .with_detail(detail.clone())
        .with_source(source);
        if let Err(e) = store.record_audit(&entry).await {
            tracing::warn!(error = %e, "cannot record the audit entry of a bulk replay");
        }
    }
    Redirect::to(&format!(
        "/console/bulk?tenant={}&done={}",
        enc(t.as_str()),
        enc(&detail)
    ))
    .into_response()
}
