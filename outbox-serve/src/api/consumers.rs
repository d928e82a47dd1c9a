//! `/v1/consumers`: the in-process consumers, global (they receive every tenant's messages),
//! so only an admin token reaches them ([`Admin`]); pausing holds a consumer's deliveries
//! until it is resumed.

use axum::extract::{Path, State};
use axum::Json;
use outboxkit_core::{ConsumerName, ConsumerStatus, Error, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Admin;
use crate::problem::{ApiResult, Problem};
use crate::state::Serve;

/// A registered consumer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConsumerView {
    /// Its name.
    pub name: String,
    /// The topics it receives (comma-separated patterns).
    pub filter: String,
    /// `active`, or `paused` (its deliveries wait, held, until it is resumed).
    pub status: String,
    /// When it was registered.
    pub created_at: String,
}

impl From<&outboxkit_core::Consumer> for ConsumerView {
    fn from(c: &outboxkit_core::Consumer) -> Self {
        ConsumerView {
            name: c.name.to_string(),
            filter: c.filter.to_string(),
            status: c.status.as_str().to_owned(),
            created_at: Timestamp::to_rfc3339(c.created_at),
        }
    }
}

/// Every consumer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConsumerList {
    /// By name.
    pub consumers: Vec<ConsumerView>,
}

/// The consumers, by name (admin token only).
#[utoipa::path(get, path = "/v1/consumers", tag = "consumers",
    responses((status = 200, body = ConsumerList), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn list(State(s): State<Serve>, _admin: Admin) -> ApiResult<Json<ConsumerList>> {
    let all = s.inner.store.list_consumers().await?;
    Ok(Json(ConsumerList {
        consumers: all.iter().map(ConsumerView::from).collect(),
    }))
}

async fn set(s: &Serve, name: &str, status: ConsumerStatus) -> ApiResult<Json<ConsumerView>> {
    let name = ConsumerName::new(name)
        .map_err(|_| Problem::from(Error::invalid_input("name", "is not a valid consumer name")))?;
    let c = s.inner.store.set_consumer_status(&name, status).await?;
    Ok(Json(ConsumerView::from(&c)))
}

/// Pause a consumer: its pending deliveries and those published meanwhile wait, held (no
/// attempt spent), and dispatchers stop claiming it within about a second (admin token only).
#[utoipa::path(post, path = "/v1/consumers/{name}/pause", tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    responses((status = 200, body = ConsumerView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn pause(
    State(s): State<Serve>,
    _admin: Admin,
    Path(name): Path<String>,
) -> ApiResult<Json<ConsumerView>> {
    set(&s, &name, ConsumerStatus::Paused).await
}

/// Resume a paused consumer: its held deliveries go out in order, a delayed message at its
/// own time (admin token only).
#[utoipa::path(post, path = "/v1/consumers/{name}/resume", tag = "consumers",
    params(("name" = String, Path, description = "The consumer's name")),
    responses((status = 200, body = ConsumerView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn resume(
    State(s): State<Serve>,
    _admin: Admin,
    Path(name): Path<String>,
) -> ApiResult<Json<ConsumerView>> {
    set(&s, &name, ConsumerStatus::Active).await
}
