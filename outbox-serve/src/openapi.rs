//! The OpenAPI 3 document, generated from the handlers' annotations.

use outboxkit_core::DeliveryStatus;
use serde_json::{json, Value};
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
        api::messages::enqueue,
        api::messages::cancel,
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
        api::deliveries::cancel,
        api::event_types::list,
        api::event_types::show,
        api::event_types::put,
        api::event_types::delete,
        api::event_types::mode,
        api::event_types::set_mode,
        api::consumers::list,
        api::consumers::pause,
        api::consumers::resume,
        api::audit::tenant,
        api::audit::all,
    ),
    components(schemas(
        Problem,
        views::EndpointView,
        views::LastDeliveryView,
        views::HeaderView,
        views::HeaderBody,
        views::EndpointList,
        views::EndpointWithSecret,
        views::NewEndpointBody,
        views::EndpointPatch,
        views::RotateBody,
        views::TestResult,
        views::Changed,
        views::CancelledView,
        views::LastOutcomeView,
        views::DestinationView,
        views::DeliveryView,
        views::AttemptView,
        views::AttemptDetailView,
        views::WireHeader,
        views::TimingView,
        views::PayloadRef,
        views::PayloadView,
        views::DeliveryDetail,
        views::DeliveryPage,
        views::BulkAction,
        views::BulkBody,
        views::BulkFilter,
        views::BulkResult,
        views::Skipped,
        views::StatsView,
        views::NewMessageBody,
        views::EnqueuedView,
        views::Health,
        api::event_types::EventTypeView,
        api::event_types::EventTypeList,
        api::event_types::EventTypeBody,
        api::event_types::ModeBody,
        api::consumers::ConsumerView,
        api::consumers::ConsumerList,
        api::audit::AuditView,
        api::audit::AuditPageView,
        api::audit::AuditQuery,
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
    let mut v = serde_json::to_value(ApiDoc::openapi()).unwrap_or(Value::Null);
    exact(&mut v);
    serde_json::from_value(v).unwrap_or_else(|_| ApiDoc::openapi())
}

/// The answers every call of a kind can get, whatever its handler does: `(status, why)`.
const SECURED: &[(&str, &str)] = &[
    ("401", "No token, or a token that is not valid"),
    ("404", "Not found, or a tenant this token may not see"),
    (
        "429",
        "Too many failed authentications from this address; see Retry-After",
    ),
    (
        "503",
        "The store (or a capability this call needs) is unavailable",
    ),
];
const WITH_BODY: &[(&str, &str)] = &[
    ("400", "The body or a value is invalid"),
    ("408", "The body did not arrive in time"),
    (
        "413",
        "The body is over the limit (checked on Content-Length before it is read)",
    ),
    ("415", "The body is not application/json"),
];

/// Make the generated document say exactly what the server does, as one pass of uniform
/// rules over it (simpler to read as data than through utoipa's builders): the answers
/// every secured call and every call with a body can get, problems as
/// `application/problem+json`, and the constraints the server checks on its parameters.
fn exact(doc: &mut Value) {
    let problem = json!({ "$ref": "#/components/schemas/Problem" });
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            // A global route (the event-type catalogue) names no tenant: nothing of a tenant
            // can be out of its token's sight.
            let tenanted = path.contains("{tenant}");
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for op in item.values_mut() {
                let secured = op.get("security").is_some();
                let body = op.get("requestBody").is_some();
                let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                    continue;
                };
                let mut add = |list: &[(&str, &str)]| {
                    for (code, why) in list {
                        if *code == "404" && !tenanted {
                            continue;
                        }
                        responses.entry(*code).or_insert_with(
                            || json!({ "description": why, "content": { "application/json": { "schema": problem } } }),
                        );
                    }
                };
                if secured {
                    add(SECURED);
                }
                if body {
                    add(WITH_BODY);
                }
                for r in responses.values_mut() {
                    let Some(content) = r.get_mut("content").and_then(Value::as_object_mut) else {
                        continue;
                    };
                    if content
                        .get("application/json")
                        .is_some_and(|c| c["schema"] == problem)
                    {
                        if let Some(c) = content.remove("application/json") {
                            content.insert("application/problem+json".into(), c);
                        }
                    }
                }
                if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
                    for p in params {
                        if let Some(schema) = param_schema(&p["name"], &p["in"]) {
                            p["schema"] = schema;
                        }
                    }
                }
            }
        }
    }
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        for (name, fields) in [
            (
                "BulkFilter",
                &["status", "endpoint", "kind", "since", "until"][..],
            ),
            ("BulkBody", &["max"][..]),
        ] {
            for f in fields {
                if let Some(prop) = schemas
                    .get_mut(name)
                    .and_then(|s| s.pointer_mut(&format!("/properties/{f}")))
                {
                    let Some(mut new) = param_schema(&json!(f), &json!("body")) else {
                        continue;
                    };
                    let nullable = prop["type"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|x| x == "null"));
                    if nullable {
                        new = json!({ "oneOf": [new, { "type": "null" }] });
                    }
                    if let Some(d) = prop.get("description").cloned() {
                        new["description"] = d;
                    }
                    *prop = new;
                }
            }
        }
    }
}

/// The schema of a parameter (or body field) the server checks.
fn param_schema(name: &Value, place: &Value) -> Option<Value> {
    let uuid = json!({ "type": "string", "format": "uuid", "description": "A UUIDv7" });
    let time = json!({ "oneOf": [
        { "type": "string", "format": "date-time", "description": "RFC 3339" },
        { "type": "string", "pattern": "^-?[0-9]+$", "description": "Unix milliseconds" },
    ] });
    Some(match (name.as_str()?, place.as_str()?) {
        ("tenant", "path") => json!({
            "type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9_.:@-]+$"
        }),
        ("id", "path") | ("endpoint", _) => uuid,
        ("status", _) => json!({
            "type": "string",
            "enum": DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        }),
        ("kind", _) => json!({ "type": "string", "enum": ["handler", "webhook", "email"] }),
        ("since" | "until", _) => time,
        ("limit", "query") => {
            json!({ "type": "integer", "minimum": 1, "maximum": 1000, "default": 50 })
        }
        ("max", "body") => {
            json!({ "type": "integer", "minimum": 1, "maximum": 1000, "default": 100 })
        }
        ("text", "query") => json!({ "type": "string", "minLength": 1, "maxLength": 200 }),
        _ => return None,
    })
}
