//! The OpenAPI document is valid OpenAPI 3 and lists exactly the router's routes.

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use outboxkit_serve::API_ROUTES;

use crate::common::App;

#[tokio::test]
async fn the_document_matches_the_routes() {
    let app = App::sqlite().await;
    let (s, doc) = app.get("/v1/openapi.json", &app.admin).await;
    assert_eq!(s, StatusCode::OK);
    // It deserialises as an OpenAPI 3.1 document, and every operation answers with
    // something documented.
    assert_eq!(doc["openapi"], "3.1.0");
    let parsed: utoipa::openapi::OpenApi = serde_json::from_value(doc.clone()).unwrap();
    assert!(!parsed.info.title.is_empty());
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            documented.insert((method.clone(), path.clone()));
            assert!(
                !op["responses"].as_object().unwrap().is_empty(),
                "{method} {path} documents no response"
            );
            // Every path parameter is declared.
            for seg in path.split('/').filter(|s| s.starts_with('{')) {
                let name = seg.trim_matches(|c| c == '{' || c == '}');
                let declared = op["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == name && p["in"] == "path"));
                assert!(declared, "{method} {path} does not declare {name}");
            }
            // Every referenced schema exists.
            for r in op
                .to_string()
                .split("\"$ref\":\"#/components/schemas/")
                .skip(1)
            {
                let name = r.split('"').next().unwrap();
                assert!(
                    doc["components"]["schemas"].get(name).is_some(),
                    "{method} {path} refers to a missing schema {name}"
                );
            }
        }
    }
    let routes: BTreeSet<(String, String)> = API_ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(
        documented, routes,
        "the document and the route table differ"
    );
    // The router serves every listed route: never 404 or 405 for the method and path.
    for (method, path) in API_ROUTES {
        let uri = path
            .replace("{tenant}", "acme")
            .replace("{id}", "0193f7a0-0000-7000-8000-000000000000");
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let (s, _, v) = app.call(m, &uri, Some(&app.admin), Some("{}")).await;
        assert!(
            s != StatusCode::METHOD_NOT_ALLOWED && v["type"] != "urn:outbox:problem:no-such-route",
            "{method} {path}: {s}"
        );
    }
    let (s, _, v) = app
        .call(
            Method::GET,
            "/v1/tenants/acme/nothing-here",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(v["type"], "urn:outbox:problem:no-such-route");
}
