//! The event-type catalogue over the API, on SQLite and PostgreSQL: admin tokens write it,
//! any token that may read reads it; a bad schema is a problem that changes nothing; the
//! mode makes `POST …/messages` refuse unknown topics and failing payloads (naming the
//! path, never a value) and endpoint creation refuse filters that match no registered type.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::App;

const SCHEMA: &str = r#"{"type":"object","required":["id"],"properties":{"items":{"type":"array","items":{"properties":{"price":{"type":"number","minimum":0}}}}}}"#;

async fn put(app: &App, uri: &str, token: &str, body: &str) -> (StatusCode, Value) {
    let (s, _, v) = app.call(Method::PUT, uri, Some(token), Some(body)).await;
    (s, v)
}

async fn scenario(app: &App) {
    let body = format!(r#"{{"description":"an order was placed","schema":{SCHEMA}}}"#);
    // Only an admin token (full access) writes the global catalogue.
    for token in [&app.writer, &app.reader, &app.enqueuer] {
        let (s, v) = put(app, "/v1/event-types/order.created", token, &body).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    }
    let (s, created) = put(app, "/v1/event-types/order.created", &app.admin, &body).await;
    assert_eq!(s, StatusCode::OK, "{created}");
    assert_eq!(created["schema"]["required"][0], "id");
    // A schema that does not compile is a problem naming the field, and changes nothing.
    let (s, v) = put(
        app,
        "/v1/event-types/order.created",
        &app.admin,
        r#"{"description":"x","schema":{"type":12}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["field"], "schema", "{v}");
    let (s, shown) = app.get("/v1/event-types/order.created", &app.reader).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(shown, created);
    let (s, v) = put(
        app,
        "/v1/event-types/order.created",
        &app.admin,
        r#"{"nope":1}"#,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    // Any token that may read lists it, with the mode.
    let (s, list) = app.get("/v1/event-types", &app.other).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["mode"], "off");
    assert_eq!(list["event_types"][0]["topic"], "order.created");
    let (s, _) = app.get("/v1/event-types/no.such", &app.reader).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // validate: unknown topics and failing payloads are refused over HTTP.
    let (s, v) = put(
        app,
        "/v1/catalogue/mode",
        &app.writer,
        r#"{"mode":"validate"}"#,
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, v) = put(
        app,
        "/v1/catalogue/mode",
        &app.admin,
        r#"{"mode":"strict"}"#,
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = put(
        app,
        "/v1/catalogue/mode",
        &app.admin,
        r#"{"mode":"validate"}"#,
    )
    .await;
    assert_eq!((s, v["mode"].as_str()), (StatusCode::OK, Some("validate")));
    let (_, mode) = app.get("/v1/catalogue/mode", &app.reader).await;
    assert_eq!(mode, json!({"mode": "validate"}));
    let send = |body: &'static str| async move {
        app.post("/v1/tenants/acme/messages", &app.writer, Some(body))
            .await
    };
    let (s, v) = send(r#"{"topic":"order.paid","payload":{"id":1}}"#).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["field"], "topic");
    let (s, v) =
        send(r#"{"topic":"order.created","payload":{"id":1,"items":[{"price":-777}]}}"#).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["field"], "payload");
    let text = v.to_string();
    assert!(
        text.contains("/items/0/price") && !text.contains("777"),
        "{text}"
    );
    let (s, v) =
        send(r#"{"topic":"order.created","payload":{"id":1,"items":[{"price":7}]}}"#).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (_, stats) = app.get("/v1/tenants/acme/stats", &app.reader).await;
    assert_eq!(
        stats["pending"].as_u64().unwrap_or(0) + stats["held"].as_u64().unwrap_or(0),
        0,
        "no endpoint yet: nothing to deliver"
    );

    // Endpoint filters are checked against the catalogue.
    let (s, v) = app
        .post(
            "/v1/tenants/acme/endpoints",
            &app.writer,
            Some(r#"{"url":"https://example.com/hook","filter":"invoice.*"}"#),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["field"], "filter");
    let (s, v) = app
        .post(
            "/v1/tenants/acme/endpoints",
            &app.writer,
            Some(r#"{"url":"https://example.com/hook","filter":"order.*"}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");

    // Delete: the topic is unknown again.
    let (s, _, _) = app
        .call(
            Method::DELETE,
            "/v1/event-types/order.created",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = send(r#"{"topic":"order.created","payload":{"id":1}}"#).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _, _) = app
        .call(
            Method::DELETE,
            "/v1/event-types/order.created",
            Some(&app.admin),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_catalogue_over_the_api_on_sqlite() {
    let app = App::sqlite().await;
    scenario(&app).await;
    app.finish().await;
}

#[tokio::test]
async fn the_catalogue_over_the_api_on_postgres() {
    let Some(app) = App::postgres().await else {
        return;
    };
    scenario(&app).await;
    app.finish().await;
}
