//! `GET /v1/tenants/{tenant}/audit` (one tenant's audit log) and `GET /v1/audit` (every
//! entry, admin-scope actions included; admin tokens only), newest first, paged.

use axum::extract::State;
use axum::Json;
use outboxkit_core::{AuditCursor, AuditEntry, TenantId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Query;
use crate::auth::{Admin, Scoped};
use crate::problem::{ApiResult, Problem};
use crate::state::Serve;

/// One recorded action.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditView {
    /// The entry's id.
    pub id: String,
    /// When (RFC 3339).
    pub at: String,
    /// The tenant acted on; null for an admin-scope action.
    pub tenant: Option<String>,
    /// Who: `token:<id> (<label>)`, or `cli`.
    pub actor: String,
    /// What, as `noun.verb` (`delivery.replay`, `endpoint.pause`, `session.login`, …).
    pub action: String,
    /// On what (an id, a name).
    pub target: String,
    /// A short note.
    pub detail: String,
    /// The client's address as the server saw it.
    pub source: Option<String>,
}

impl From<&AuditEntry> for AuditView {
    fn from(e: &AuditEntry) -> Self {
        AuditView {
            id: e.id.to_string(),
            at: e.at.to_rfc3339(),
            tenant: e.tenant.as_ref().map(|t| t.to_string()),
            actor: e.actor.clone(),
            action: e.action.clone(),
            target: e.target.clone(),
            detail: e.detail.clone(),
            source: e.source.clone(),
        }
    }
}

/// A page of the audit log.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditPageView {
    /// Newest first.
    pub entries: Vec<AuditView>,
    /// Pass as `cursor` for the next page; null at the end.
    pub next_cursor: Option<String>,
}

/// Which page.
#[derive(Clone, Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// At most this many entries (1–1000, default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

async fn page(s: &Serve, tenant: Option<&TenantId>, q: &AuditQuery) -> ApiResult<AuditPageView> {
    let cursor = q
        .cursor
        .as_deref()
        .map(AuditCursor::decode)
        .transpose()
        .map_err(|e| Problem::from(e).field("cursor"))?;
    let limit = q.limit.unwrap_or(50);
    let p = s
        .inner
        .console
        .list_audit(tenant, limit, cursor)
        .await
        .map_err(|e| Problem::from(e).field("limit"))?;
    Ok(AuditPageView {
        entries: p.items.iter().map(AuditView::from).collect(),
        next_cursor: p.next.map(|c| c.encode()),
    })
}

/// A page of the tenant's audit log, newest first.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/audit", tag = "audit",
    params(("tenant" = String, Path, description = "The tenant"), AuditQuery),
    responses((status = 200, body = AuditPageView), (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn tenant(
    State(s): State<Serve>,
    scope: Scoped,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Json<AuditPageView>> {
    Ok(Json(page(&s, Some(&scope.tenant), &q).await?))
}

/// A page of the whole audit log (every tenant and the admin-scope actions), newest first;
/// admin tokens only.
#[utoipa::path(get, path = "/v1/audit", tag = "audit",
    params(AuditQuery),
    responses((status = 200, body = AuditPageView), (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn all(
    State(s): State<Serve>,
    _admin: Admin,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Json<AuditPageView>> {
    Ok(Json(page(&s, None, &q).await?))
}
