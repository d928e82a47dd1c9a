//! The OpenAPI 3 document, generated from the handlers' annotations.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::api;
use crate::problem::Problem;
use crate::views;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document served at `/v1/openapi.json`.
#[derive(OpenApi)]
#[openapi(
    info(title = "outbox admin API", description = "Endpoints, deliveries, replay and statistics of an outbox, per tenant. Every error is an RFC 9457 problem (application/problem+json)."),
    paths(
        api::health,
        openapi_json,
        api::stats,
        api::endpoints::list,
        api::endpoints::create,
        api::endpoints::show,
        api::endpoints::update,
        api::endpoints::delete,
        api::endpoints::pause,
        api::endpoints::resume,
        api::endpoints::rotate,
        api::endpoints::finish_rotation,
        api::endpoints::release_held,
        api::endpoints::test,
        api::deliveries::list,
        api::deliveries::bulk,
        api::deliveries::show,
        api::deliveries::replay,
        api::deliveries::retry,
    ),
    components(schemas(
        Problem,
        views::EndpointView,
        views::LastDeliveryView,
        views::EndpointList,
        views::EndpointWithSecret,
        views::NewEndpointBody,
        views::EndpointPatch,
        views::RotateBody,
        views::TestResult,
        views::Changed,
        views::LastOutcomeView,
        views::DestinationView,
        views::DeliveryView,
        views::AttemptView,
        views::DeliveryDetail,
        views::DeliveryPage,
        views::BulkAction,
        views::BulkBody,
        views::BulkFilter,
        views::BulkResult,
        views::Skipped,
        views::StatsView,
        views::Health,
    )),
    modifiers(&Bearer)
)]
struct ApiDoc;

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI 3 document", content_type = "application/json")))]
#[allow(dead_code)]
fn openapi_json() {}

/// The OpenAPI document of the API.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
