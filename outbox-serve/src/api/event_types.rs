//! The event-type catalogue (`/v1/event-types`, `/v1/catalogue/mode`): global, like the
//! consumers. Reads with any token that may read; writes with a full admin token ([`Global`]).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use outboxkit_core::{CatalogueMode, EventType, NewEventType, Topic};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::Body;
use crate::auth::Global;
use crate::problem::{ApiResult, Problem};
use crate::state::Serve;

/// A registered event type.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventTypeView {
    /// The topic.
    pub topic: String,
    /// What it means.
    pub description: String,
    /// Its JSON Schema, or `null`.
    #[schema(value_type = Option<Object>)]
    pub schema: Option<serde_json::Value>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

impl From<&EventType> for EventTypeView {
    fn from(t: &EventType) -> Self {
        EventTypeView {
            topic: t.topic.to_string(),
            description: t.description.clone(),
            schema: t.schema.clone(),
            created_at: t.created_at.to_rfc3339(),
            updated_at: t.updated_at.to_rfc3339(),
        }
    }
}

/// The catalogue: its mode and every type, by topic.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventTypeList {
    /// `off`, `refuse-unknown` or `validate`.
    pub mode: String,
    /// The types.
    pub event_types: Vec<EventTypeView>,
}

/// A type to register or replace (`PUT /v1/event-types/{topic}`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventTypeBody {
    /// What it means (at most 1000 bytes).
    #[serde(default)]
    pub description: String,
    /// A JSON Schema (object or boolean) its payloads must meet in mode `validate`.
    #[schema(value_type = Option<Object>)]
    pub schema: Option<serde_json::Value>,
}

/// The catalogue's mode.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModeBody {
    /// `off` (nothing checked), `refuse-unknown` (unregistered topics refused) or
    /// `validate` (payloads checked against their type's schema too).
    pub mode: String,
}

fn topic(s: &str) -> ApiResult<Topic> {
    Topic::new(s).map_err(|e| Problem::from(e).field("topic"))
}

/// The catalogue: its mode and every registered type.
#[utoipa::path(get, path = "/v1/event-types", tag = "event-types",
    responses((status = 200, body = EventTypeList), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn list(State(s): State<Serve>, _: Global) -> ApiResult<Json<EventTypeList>> {
    let types = s.inner.store.list_event_types().await?;
    let mode = s.inner.store.catalogue_mode().await?;
    Ok(Json(EventTypeList {
        mode: mode.as_str().to_owned(),
        event_types: types.iter().map(EventTypeView::from).collect(),
    }))
}

/// One registered type.
#[utoipa::path(get, path = "/v1/event-types/{topic}", tag = "event-types",
    params(("topic" = String, Path, description = "The topic")),
    responses((status = 200, body = EventTypeView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn show(
    State(s): State<Serve>,
    _: Global,
    Path(t): Path<String>,
) -> ApiResult<Json<EventTypeView>> {
    let t = s.inner.store.get_event_type(&topic(&t)?).await?;
    Ok(Json(EventTypeView::from(&t)))
}

/// Register a type, or replace the one of its topic (its `created_at` is kept). A schema
/// that does not compile is a 400 and changes nothing. Needs an admin token.
#[utoipa::path(put, path = "/v1/event-types/{topic}", tag = "event-types",
    params(("topic" = String, Path, description = "The topic")),
    request_body = EventTypeBody,
    responses((status = 200, body = EventTypeView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn put(
    State(s): State<Serve>,
    _: Global,
    Path(t): Path<String>,
    Body(body): Body<EventTypeBody>,
) -> ApiResult<Json<EventTypeView>> {
    let new = NewEventType {
        topic: topic(&t)?,
        description: body.description,
        schema: body.schema,
    };
    let stored = s.inner.store.put_event_type(&new).await?;
    Ok(Json(EventTypeView::from(&stored)))
}

/// Remove a type. Needs an admin token.
#[utoipa::path(delete, path = "/v1/event-types/{topic}", tag = "event-types",
    params(("topic" = String, Path, description = "The topic")),
    responses((status = 204), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn delete(
    State(s): State<Serve>,
    _: Global,
    Path(t): Path<String>,
) -> ApiResult<StatusCode> {
    s.inner.store.delete_event_type(&topic(&t)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The catalogue's mode.
#[utoipa::path(get, path = "/v1/catalogue/mode", tag = "event-types",
    responses((status = 200, body = ModeBody), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn mode(State(s): State<Serve>, _: Global) -> ApiResult<Json<ModeBody>> {
    let mode = s.inner.store.catalogue_mode().await?;
    Ok(Json(ModeBody {
        mode: mode.as_str().to_owned(),
    }))
}

/// Set the catalogue's mode. Needs an admin token.
#[utoipa::path(put, path = "/v1/catalogue/mode", tag = "event-types",
    request_body = ModeBody,
    responses((status = 200, body = ModeBody), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn set_mode(
    State(s): State<Serve>,
    _: Global,
    Body(body): Body<ModeBody>,
) -> ApiResult<Json<ModeBody>> {
    let mode: CatalogueMode = body.mode.parse()?;
    s.inner.store.set_catalogue_mode(mode).await?;
    Ok(Json(ModeBody {
        mode: mode.as_str().to_owned(),
    }))
}
