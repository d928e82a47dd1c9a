//! The router: the API under `/v1`, its OpenAPI document, the console under `/console`, and
//! the headers every answer carries.

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::api::{self, deliveries, endpoints, messages};
use crate::problem::Problem;
use crate::state::Serve;

/// Every API route as `(method, path)`, the way the OpenAPI document names them. A test
/// checks that the document lists exactly these and that the router answers each.
pub const API_ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/health"),
    ("get", "/v1/openapi.json"),
    ("get", "/v1/tenants/{tenant}/stats"),
    ("post", "/v1/tenants/{tenant}/messages"),
    ("post", "/v1/tenants/{tenant}/messages/{id}/cancel"),
    ("get", "/v1/tenants/{tenant}/endpoints"),
    ("post", "/v1/tenants/{tenant}/endpoints"),
    ("get", "/v1/tenants/{tenant}/endpoints/{id}"),
    ("patch", "/v1/tenants/{tenant}/endpoints/{id}"),
    ("delete", "/v1/tenants/{tenant}/endpoints/{id}"),
    ("post", "/v1/tenants/{tenant}/endpoints/{id}/pause"),
    ("post", "/v1/tenants/{tenant}/endpoints/{id}/resume"),
    ("post", "/v1/tenants/{tenant}/endpoints/{id}/rotate-secret"),
    (
        "post",
        "/v1/tenants/{tenant}/endpoints/{id}/finish-rotation",
    ),
    ("post", "/v1/tenants/{tenant}/endpoints/{id}/release-held"),
    ("post", "/v1/tenants/{tenant}/endpoints/{id}/test"),
    ("get", "/v1/tenants/{tenant}/deliveries"),
    ("post", "/v1/tenants/{tenant}/deliveries/bulk"),
    ("get", "/v1/tenants/{tenant}/deliveries/{id}"),
    ("post", "/v1/tenants/{tenant}/deliveries/{id}/replay"),
    ("post", "/v1/tenants/{tenant}/deliveries/{id}/retry"),
    ("post", "/v1/tenants/{tenant}/deliveries/{id}/cancel"),
    ("get", "/v1/event-types"),
    ("get", "/v1/event-types/{topic}"),
    ("put", "/v1/event-types/{topic}"),
    ("delete", "/v1/event-types/{topic}"),
    ("get", "/v1/catalogue/mode"),
    ("put", "/v1/catalogue/mode"),
    ("get", "/v1/consumers"),
    ("post", "/v1/consumers/{name}/pause"),
    ("post", "/v1/consumers/{name}/resume"),
    ("get", "/v1/tenants/{tenant}/audit"),
    ("get", "/v1/audit"),
];

/// The Content-Security-Policy of every answer: nothing but this origin's own styles,
/// scripts and fetches (the console refreshing its page), no framing, forms only to this
/// origin.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; \
                       connect-src 'self'; img-src 'self'; form-action 'self'; \
                       frame-ancestors 'none'; base-uri 'none'";

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::document())
}

async fn no_route() -> Problem {
    Problem::new(StatusCode::NOT_FOUND, "no-such-route", "No such route")
}

async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
    )
}

async fn security_headers(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    res
}

impl Serve {
    /// The axum router of the API (`/v1`) and the console (`/console`).
    pub fn router(&self) -> Router {
        router(self.clone())
    }
}

fn router(state: Serve) -> Router {
    let t = "/v1/tenants/{tenant}";
    let limit = state.inner.config.body_limit;
    let enqueue_limit = state.inner.config.enqueue_body_limit;
    let api = Router::new()
        .route("/v1/health", get(api::health))
        .route("/v1/openapi.json", get(openapi))
        .route(&format!("{t}/stats"), get(api::stats))
        .route("/v1/event-types", get(api::event_types::list))
        .route(
            "/v1/event-types/{topic}",
            get(api::event_types::show)
                .put(api::event_types::put)
                .delete(api::event_types::delete),
        )
        .route(
            "/v1/catalogue/mode",
            get(api::event_types::mode).put(api::event_types::set_mode),
        )
        .route(
            &format!("{t}/messages"),
            post(messages::enqueue).layer(DefaultBodyLimit::max(enqueue_limit)),
        )
        .route(
            &format!("{t}/endpoints"),
            get(endpoints::list).post(endpoints::create),
        )
        .route(
            &format!("{t}/endpoints/{{id}}"),
            get(endpoints::show)
                .patch(endpoints::update)
                .delete(endpoints::delete),
        )
        .route(
            &format!("{t}/endpoints/{{id}}/pause"),
            post(endpoints::pause),
        )
        .route(
            &format!("{t}/endpoints/{{id}}/resume"),
            post(endpoints::resume),
        )
        .route(
            &format!("{t}/endpoints/{{id}}/rotate-secret"),
            post(endpoints::rotate),
        )
        .route(
            &format!("{t}/endpoints/{{id}}/finish-rotation"),
            post(endpoints::finish_rotation),
        )
        .route(
            &format!("{t}/endpoints/{{id}}/release-held"),
            post(endpoints::release_held),
        )
        .route(&format!("{t}/endpoints/{{id}}/test"), post(endpoints::test))
        .route(&format!("{t}/deliveries"), get(deliveries::list))
        .route(&format!("{t}/deliveries/bulk"), post(deliveries::bulk))
        .route(&format!("{t}/deliveries/{{id}}"), get(deliveries::show))
        .route(
            &format!("{t}/deliveries/{{id}}/replay"),
            post(deliveries::replay),
        )
        .route(
            &format!("{t}/deliveries/{{id}}/retry"),
            post(deliveries::retry),
        )
        .route(
            &format!("{t}/deliveries/{{id}}/cancel"),
            post(deliveries::cancel),
        )
        .route(
            &format!("{t}/messages/{{id}}/cancel"),
            post(messages::cancel),
        )
        .route("/v1/consumers", get(api::consumers::list))
        .route("/v1/consumers/{name}/pause", post(api::consumers::pause))
        .route("/v1/consumers/{name}/resume", post(api::consumers::resume))
        .route(&format!("{t}/audit"), get(api::audit::tenant))
        .route("/v1/audit", get(api::audit::all))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::audit::record,
        ));
    let base = state.inner.config.base_path.clone();
    let app = Router::new()
        .merge(api)
        .merge(crate::console::routes())
        .route("/", get(|| async { Redirect::to("/console") }))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::server::read_body,
        ))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(state);
    if base.is_root() {
        return app;
    }
    // Under a prefix: the same router nested there, the prefix added at the edge, and
    // nothing outside it.
    Router::new()
        .nest(base.prefix(), app)
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(
            base,
            crate::base_path::under_prefix,
        ))
        .layer(axum::middleware::from_fn(security_headers))
}
