//! The JSON API under `/v1`. Every handler authenticates first ([`Scoped`]), then checks its
//! input, then acts: a request that fails a check changes nothing.

pub(crate) mod deliveries;
pub(crate) mod endpoints;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::Json;
use outboxkit_core::{DeliveryId, EndpointId, Timestamp};
use serde::de::DeserializeOwned;

use crate::auth::Scoped;
use crate::problem::{ApiResult, Problem};
use crate::state::Serve;
use crate::views::{Health, StatsView};

/// A JSON body whose rejections are problems (400, 413, 415).
pub(crate) struct Body<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) => Err(Problem::from(e as JsonRejection)),
        }
    }
}

/// A JSON body that may be absent (an empty body is the default value).
pub(crate) struct OptBody<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let empty = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .is_some_and(|v| v == "0")
            || !req.headers().contains_key(axum::http::header::CONTENT_TYPE);
        if empty {
            let bytes = axum::body::Bytes::from_request(req, state)
                .await
                .map_err(|_| Problem::bad_request("the body could not be read"))?;
            if !bytes.is_empty() {
                return Err(Problem::new(
                    axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported-media-type",
                    "The body must be application/json",
                ));
            }
            return Ok(OptBody(T::default()));
        }
        Body::<T>::from_request(req, state)
            .await
            .map(|Body(v)| OptBody(v))
    }
}

/// A query string whose rejections are problems (400).
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(e) => Err(Problem::from(e as QueryRejection)),
        }
    }
}

/// An id from the path: a malformed one is 400 (the caller is already authenticated).
pub(crate) fn delivery_id(s: &str) -> ApiResult<DeliveryId> {
    DeliveryId::parse(s)
        .map_err(|_| Problem::bad_request("the delivery id is not a UUIDv7").field("delivery_id"))
}

/// An endpoint id from the path or a filter.
pub(crate) fn endpoint_id(s: &str) -> ApiResult<EndpointId> {
    EndpointId::parse(s)
        .map_err(|_| Problem::bad_request("the endpoint id is not a UUIDv7").field("endpoint_id"))
}

/// A time filter: Unix milliseconds.
pub(crate) fn millis(field: &'static str, s: &str) -> ApiResult<Timestamp> {
    s.parse::<i64>()
        .ok()
        .and_then(|ms| Timestamp::from_unix_millis(ms).ok())
        .ok_or_else(|| Problem::bad_request("must be Unix milliseconds").field(field))
}

/// Liveness and the store's reachability (no token needed; says nothing else).
#[utoipa::path(get, path = "/v1/health", tag = "health",
    responses((status = 200, body = Health), (status = 503, body = Health)))]
pub(crate) async fn health(State(s): State<Serve>) -> (axum::http::StatusCode, Json<Health>) {
    match s.inner.store.stats().await {
        Ok(_) => (
            axum::http::StatusCode::OK,
            Json(Health {
                status: "ok".into(),
            }),
        ),
        Err(_) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "unavailable".into(),
            }),
        ),
    }
}

/// Delivery counts of the tenant.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/stats", tag = "stats",
    params(("tenant" = String, Path, description = "The tenant")),
    responses((status = 200, body = StatsView), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn stats(State(s): State<Serve>, scope: Scoped) -> ApiResult<Json<StatsView>> {
    let st = s.inner.store.tenant_stats(&scope.tenant, None).await?;
    Ok(Json(StatsView::from(&st)))
}
