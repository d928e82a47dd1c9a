//! `/v1/tenants/{tenant}/deliveries…`.

use axum::extract::{Path, State};
use axum::Json;
use outboxkit_core::store::{Cursor, DeliveryFilter, PageRequest};
use outboxkit_core::{DeliveryStatus, DestinationKind, ErrorKind, TenantId, Topic};

use super::{delivery_id, endpoint_id, millis, Body, Query};
use crate::auth::Scoped;
use crate::problem::{ApiResult, Problem};
use crate::state::Serve;
use crate::views::{
    AttemptView, BulkAction, BulkBody, BulkFilter, BulkResult, Changed, DeliveryDetail,
    DeliveryPage, DeliveryQuery, DeliveryView, PayloadView, Skipped,
};

/// The store's filter from the query's fields (each checked).
pub(crate) fn filter(q: &BulkFilter, text: Option<&str>) -> ApiResult<DeliveryFilter> {
    let field = |f: &'static str| move |e: outboxkit_core::Error| Problem::from(e).field(f);
    let f = DeliveryFilter {
        status: q
            .status
            .as_deref()
            .map(DeliveryStatus::parse)
            .transpose()
            .map_err(field("status"))?,
        endpoint: q.endpoint.as_deref().map(endpoint_id).transpose()?,
        kind: q
            .kind
            .as_deref()
            .map(DestinationKind::parse)
            .transpose()
            .map_err(field("kind"))?,
        topic: q
            .topic
            .as_deref()
            .map(Topic::new)
            .transpose()
            .map_err(field("topic"))?,
        since: q.since.as_deref().map(|s| millis("since", s)).transpose()?,
        until: q.until.as_deref().map(|s| millis("until", s)).transpose()?,
        text: text.map(str::to_owned),
        ..DeliveryFilter::default()
    };
    f.validate()?;
    Ok(f)
}

fn as_bulk_filter(q: &DeliveryQuery) -> BulkFilter {
    BulkFilter {
        status: q.status.clone(),
        endpoint: q.endpoint.clone(),
        kind: q.kind.clone(),
        topic: q.topic.clone(),
        since: q.since.clone(),
        until: q.until.clone(),
    }
}

/// Parse the query of a listing: the filter and the page.
pub(crate) fn page_of(q: &DeliveryQuery) -> ApiResult<(DeliveryFilter, PageRequest)> {
    let f = filter(&as_bulk_filter(q), q.text.as_deref())?;
    let page = PageRequest {
        limit: q.limit.unwrap_or(50),
        cursor: q
            .cursor
            .as_deref()
            .map(Cursor::decode)
            .transpose()
            .map_err(|e| Problem::from(e).field("cursor"))?,
    };
    page.validate()?;
    Ok((f, page))
}

/// A page of the tenant's deliveries, newest first, filtered.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/deliveries", tag = "deliveries",
    params(("tenant" = String, Path, description = "The tenant"), DeliveryQuery),
    responses((status = 200, body = DeliveryPage), (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn list(
    State(s): State<Serve>,
    scope: Scoped,
    Query(q): Query<DeliveryQuery>,
) -> ApiResult<Json<DeliveryPage>> {
    let (f, page) = page_of(&q)?;
    let p = s
        .inner
        .store
        .list_deliveries(&scope.tenant, &f, page)
        .await?;
    Ok(Json(DeliveryPage {
        deliveries: p.items.iter().map(DeliveryView::from).collect(),
        next_cursor: p.next.map(|c| c.encode()),
    }))
}

/// One delivery with its payload and its attempt ledger, each attempt in full (request
/// headers as sent, response headers and body within the relay's cap, timings, address).
#[utoipa::path(get, path = "/v1/tenants/{tenant}/deliveries/{id}", tag = "deliveries",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The delivery id")),
    responses((status = 200, body = DeliveryDetail), (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn show(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<DeliveryDetail>> {
    Ok(Json(detail(&s, &scope.tenant, &id).await?))
}

pub(crate) async fn detail(s: &Serve, tenant: &TenantId, id: &str) -> ApiResult<DeliveryDetail> {
    let id = delivery_id(id)?;
    let d = s.inner.store.get_delivery(tenant, id).await?;
    let attempts = s.inner.store.attempts(tenant, id).await?;
    let message = s.inner.store.get_message(tenant, d.message_id).await?;
    Ok(DeliveryDetail {
        delivery: DeliveryView::from(&d),
        payload: PayloadView::from(&message),
        attempts: attempts.iter().map(AttemptView::from).collect(),
    })
}

/// Give a dead delivery a fresh budget, due now (409 for any other status).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/deliveries/{id}/replay", tag = "deliveries",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The delivery id")),
    responses((status = 200, body = Changed), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn replay(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<Changed>> {
    s.inner
        .operator()
        .replay(&scope.tenant, delivery_id(&id)?)
        .await?;
    Ok(Json(Changed { changed: 1 }))
}

/// Make a pending or held delivery due now (409 for any other status).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/deliveries/{id}/retry", tag = "deliveries",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The delivery id")),
    responses((status = 200, body = Changed), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn retry(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<Changed>> {
    s.inner
        .operator()
        .retry_now(&scope.tenant, delivery_id(&id)?)
        .await?;
    Ok(Json(Changed { changed: 1 }))
}

/// Cancel a pending or held delivery before it is sent: it becomes dead (`cancelled`) and a
/// replay sends it again. 409 for a delivery in flight (it may already be sent) or finished.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/deliveries/{id}/cancel", tag = "deliveries",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The delivery id")),
    responses((status = 200, body = Changed), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn cancel(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<Changed>> {
    s.inner
        .operator()
        .cancel(&scope.tenant, delivery_id(&id)?)
        .await?;
    Ok(Json(Changed { changed: 1 }))
}

/// Replay, retry, reset or cancel every delivery that matches a filter (at most `max`); with
/// `dry_run`, list them and change nothing.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/deliveries/bulk", tag = "deliveries",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body = BulkBody,
    responses((status = 200, body = BulkResult), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 413, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn bulk(
    State(s): State<Serve>,
    scope: Scoped,
    Body(b): Body<BulkBody>,
) -> ApiResult<Json<BulkResult>> {
    let max = b.max.unwrap_or(100);
    if !(1..=1000).contains(&max) {
        return Err(Problem::bad_request("must be from 1 to 1000").field("max"));
    }
    let mut f = filter(&b.filter, None)?;
    let applies = match b.action {
        BulkAction::Replay => vec![DeliveryStatus::Dead],
        BulkAction::Retry => vec![DeliveryStatus::Pending, DeliveryStatus::Held],
        BulkAction::Reset => vec![DeliveryStatus::Held],
        BulkAction::Cancel => vec![DeliveryStatus::Pending, DeliveryStatus::Held],
    };
    match f.status {
        Some(st) if !applies.contains(&st) => {
            return Err(Problem::bad_request(format!(
                "this action does not apply to {st} deliveries"
            ))
            .field("filter.status"))
        }
        Some(_) => {}
        None if applies.len() == 1 => f.status = Some(applies[0]),
        None => {}
    }
    // Collect first (paging through the listing), then act, so changes do not move pages.
    let mut matched = Vec::new();
    let mut cursor = None;
    'pages: loop {
        let page = s
            .inner
            .store
            .list_deliveries(&scope.tenant, &f, PageRequest { limit: 200, cursor })
            .await?;
        for d in &page.items {
            if applies.contains(&d.status) {
                matched.push(d.id);
                if matched.len() >= max as usize {
                    break 'pages;
                }
            }
        }
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut changed = 0;
    let mut skipped = Vec::new();
    if !b.dry_run {
        let op = s.inner.operator();
        for id in &matched {
            let r = match b.action {
                BulkAction::Replay => op.replay(&scope.tenant, *id).await,
                BulkAction::Retry => op.retry_now(&scope.tenant, *id).await,
                BulkAction::Reset => op.reset(&scope.tenant, *id).await,
                BulkAction::Cancel => op.cancel(&scope.tenant, *id).await,
            };
            match r {
                Ok(()) => changed += 1,
                Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => skipped
                    .push(Skipped {
                        id: id.to_string(),
                        reason: e.to_string(),
                    }),
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Json(BulkResult {
        action: b.action,
        dry_run: b.dry_run,
        matched: matched.iter().map(ToString::to_string).collect(),
        changed,
        skipped,
    }))
}
