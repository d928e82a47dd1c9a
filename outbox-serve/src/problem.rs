//! RFC 9457 problem bodies: every 4xx and 5xx of the API is one, with
//! `Content-Type: application/problem+json`.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use outboxkit_core::{Error, ErrorKind};
use serde::Serialize;
use utoipa::ToSchema;

/// A problem detail (RFC 9457).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem (`urn:outbox:problem:<name>`).
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong with this request (never a secret, a payload or an address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The input field at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Seconds to wait before trying again (429).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl Problem {
    /// A problem of `status` named `name`.
    pub fn new(status: StatusCode, name: &str, title: &str) -> Self {
        Problem {
            kind: format!("urn:outbox:problem:{name}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail: None,
            field: None,
            retry_after: None,
        }
    }

    /// With a detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// With the field at fault.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// 400: the request is malformed or a value is invalid.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, "invalid-input", "Invalid input").detail(detail)
    }

    /// 401: no token, or a token that is not valid. The same answer for every cause.
    pub fn unauthorized() -> Self {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "A valid bearer token is required",
        )
    }

    /// 403: the token may not do this (read-only, or not an admin token).
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Problem::new(StatusCode::FORBIDDEN, "forbidden", "Not allowed").detail(detail)
    }

    /// 404: nothing here (also for another tenant's things, so nothing is leaked).
    pub fn not_found() -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found")
    }

    /// 429 after too many failed authentications.
    pub fn too_many(retry_after: u64) -> Self {
        let mut p = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "Too many failed authentications",
        )
        .detail("wait before trying again");
        p.retry_after = Some(retry_after.max(1));
        p
    }

    /// 503: a capability this server was started without (the vault, the transport).
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Unavailable",
        )
        .detail(detail)
    }

    /// The status as a [`StatusCode`].
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status_code();
        let retry = self.retry_after;
        let mut res = (status, axum::Json(self)).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(s) = retry {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                res.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        res
    }
}

impl From<Error> for Problem {
    fn from(e: Error) -> Self {
        let with_field = |p: Problem| match e.field() {
            Some(f) => p.field(f),
            None => p,
        };
        match e.kind() {
            ErrorKind::InvalidInput => with_field(Problem::bad_request(e.to_string())),
            ErrorKind::NotFound => Problem::not_found(),
            ErrorKind::Conflict => with_field(
                Problem::new(StatusCode::CONFLICT, "conflict", "Conflict").detail(e.to_string()),
            ),
            ErrorKind::Unavailable | ErrorKind::Timeout => {
                tracing::warn!(error = %e, "the store is unavailable");
                Problem::unavailable("the store is unavailable; try again")
            }
            _ => {
                tracing::error!(error = %e, "an admin API call failed");
                Problem::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                )
            }
        }
    }
}

impl From<JsonRejection> for Problem {
    fn from(r: JsonRejection) -> Self {
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too-large",
                "The body is too large",
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE => Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "The body must be application/json",
            ),
            _ => Problem::bad_request(body_detail(&r.body_text())),
        }
    }
}

/// serde's message without the echo of the input (it names fields and positions only).
fn body_detail(text: &str) -> String {
    let t = text
        .strip_prefix("Failed to deserialize the JSON body into the target type: ")
        .unwrap_or(text);
    let t = t
        .strip_prefix("Failed to parse the request body as JSON: ")
        .unwrap_or(t);
    format!("the body is not valid: {}", truncate(t, 200))
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

impl From<QueryRejection> for Problem {
    fn from(r: QueryRejection) -> Self {
        let t = r.body_text();
        let t = t
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&t);
        Problem::bad_request(format!("the query is not valid: {}", truncate(t, 200)))
    }
}

impl From<PathRejection> for Problem {
    fn from(_: PathRejection) -> Self {
        Problem::not_found()
    }
}

/// The result of a handler.
pub type ApiResult<T> = std::result::Result<T, Problem>;
