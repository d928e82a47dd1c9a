//! The JSON API under `/v1`. Every handler authenticates first ([`Scoped`]), then checks its
//! input, then acts: a request that fails a check changes nothing.

pub(crate) mod audit;
pub(crate) mod consumers;
pub(crate) mod deliveries;
pub(crate) mod endpoints;
pub(crate) mod event_types;
pub(crate) mod messages;

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

/// A time filter: RFC 3339 (`2026-11-29T10:00:00Z`, `…T10:00:00.250+01:00`) or Unix
/// milliseconds (`1764410400000`, as earlier versions took).
pub(crate) fn millis(field: &'static str, s: &str) -> ApiResult<Timestamp> {
    let s = s.trim();
    let ms = if !s.is_empty()
        && s.trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        s.parse::<i64>().ok()
    } else {
        rfc3339_millis(s)
    };
    ms.and_then(|ms| Timestamp::from_unix_millis(ms).ok())
        .ok_or_else(|| {
            Problem::bad_request("must be an RFC 3339 time or Unix milliseconds").field(field)
        })
}

/// An RFC 3339 date-time as Unix milliseconds (a finer fraction is cut to milliseconds).
fn rfc3339_millis(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let days_in = [
        31,
        if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) {
            29
        } else {
            28
        },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > days_in[(mo - 1) as usize]
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 3)];
        frac_ms = digits.parse::<i64>().ok()? * 10i64.pow(3 - digits.len() as u32);
    }
    let offset_min = match &s[i..] {
        "Z" | "z" => 0,
        o if o.len() == 6 && matches!(o.as_bytes()[0], b'+' | b'-') && o.as_bytes()[3] == b':' => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if o.starts_with('-') {
                -m
            } else {
                m
            }
        }
        _ => return None,
    };
    // Days from civil (H. Hinnant's algorithm).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec.min(59) - offset_min * 60;
    Some(secs * 1000 + frac_ms)
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

#[cfg(test)]
mod tests {
    use super::rfc3339_millis;

    #[test]
    fn rfc3339_times_row_by_row() {
        let rows: &[(&str, Option<i64>)] = &[
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2026-11-29T10:00:00.000Z", Some(1_795_946_400_000)),
            ("2026-11-29T11:00:00.5+01:00", Some(1_795_946_400_500)),
            ("2026-11-29t09:30:00.123456-00:30", Some(1_795_946_400_123)),
            ("2024-02-29T00:00:00Z", Some(1_709_164_800_000)),
            ("2023-02-29T00:00:00Z", None),
            ("2026-13-01T00:00:00Z", None),
            ("2026-11-29T10:00:00", None),
            ("2026-11-29T10:00:00.Z", None),
            ("2026-11-29T10:00:00+0100", None),
            ("yesterday", None),
        ];
        for (text, want) in rows {
            assert_eq!(rfc3339_millis(text), *want, "{text}");
        }
    }
}
