//! Endpoints' custom headers through the API and the console: created and patched
//! (replace, remove, set), read back with secret values masked, sent by the test event;
//! a bad header is a 400 problem naming it and changes nothing.

use axum::http::{Method, StatusCode};
use outboxkit_testing::WebhookReceiver;
use serde_json::{json, Value};

use crate::common::App;

async fn patch(app: &App, uri: &str, body: Value) -> (StatusCode, Value) {
    let (s, _, v) = app
        .call(
            Method::PATCH,
            uri,
            Some(&app.writer),
            Some(&body.to_string()),
        )
        .await;
    (s, v)
}

#[tokio::test]
async fn headers_are_created_patched_masked_and_sent() {
    let app = App::sqlite().await;
    let receiver = WebhookReceiver::start().await.unwrap();
    let body = json!({
        "url": receiver.url(),
        "headers": [
            {"name": "X-Route", "value": "<eu & \"west\">"},
            {"name": "Authorization", "value": "Bearer key-one", "secret": true},
        ],
    });
    let (s, created) = app
        .post(
            "/v1/tenants/acme/endpoints",
            &app.writer,
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let masked = json!([
        {"name": "x-route", "value": "<eu & \"west\">", "secret": false},
        {"name": "authorization", "value": null, "secret": true},
    ]);
    assert_eq!(created["endpoint"]["headers"], masked);
    assert!(!created.to_string().contains("key-one"));
    let id = created["endpoint"]["id"].as_str().unwrap().to_owned();
    let ep = format!("/v1/tenants/acme/endpoints/{id}");
    let (_, shown) = app.get(&ep, &app.writer).await;
    assert_eq!(shown["headers"], masked);
    let (_, list) = app.get("/v1/tenants/acme/endpoints", &app.writer).await;
    assert_eq!(list["endpoints"][0]["headers"], masked);

    // The console lists them, escaped, the secret value masked.
    let cookie = crate::console::login(&app, &app.writer).await;
    let (s, _, html) = crate::auth::raw(
        &app,
        axum::http::Request::get("/console/endpoints?tenant=acme")
            .header("cookie", &cookie)
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        html.contains("x-route: &lt;eu &amp; &quot;west&quot;&gt;"),
        "{html}"
    );
    assert!(html.contains("authorization: ********"), "{html}");
    assert!(!html.contains("key-one") && !html.contains("<eu"), "{html}");

    // The test event carries them, the secret one opened.
    let (s, tested) = app.post(&format!("{ep}/test"), &app.writer, None).await;
    assert_eq!(s, StatusCode::OK, "{tested}");
    let got = receiver.requests().pop().unwrap();
    assert_eq!(got.header("x-route"), Some("<eu & \"west\">"));
    assert_eq!(got.header("authorization"), Some("Bearer key-one"));

    // Rotate the secret value and drop the plain header.
    let (s, v) = patch(
        &app,
        &ep,
        json!({
            "remove_headers": ["X-ROUTE"],
            "set_headers": [{"name": "authorization", "value": "Bearer key-two", "secret": true}],
        }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["headers"],
        json!([{"name": "authorization", "value": null, "secret": true}])
    );
    app.post(&format!("{ep}/test"), &app.writer, None).await;
    let got = receiver.requests().pop().unwrap();
    assert_eq!(got.header("authorization"), Some("Bearer key-two"));
    assert_eq!(got.header("x-route"), None);

    // Replace them all, then none.
    let (s, v) = patch(
        &app,
        &ep,
        json!({"headers": [{"name": "x-a", "value": "1"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["headers"],
        json!([{"name": "x-a", "value": "1", "secret": false}])
    );
    let (s, v) = patch(&app, &ep, json!({"headers": []})).await;
    assert_eq!((s, v["headers"].clone()), (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn a_bad_header_is_a_problem_naming_it_and_changes_nothing() {
    let app = App::sqlite().await;
    let bad_creates = [
        (json!([{"name": "webhook-id", "value": "x"}]), "webhook-id"),
        (
            json!([{"name": "Content-Length", "value": "1"}]),
            "content-length",
        ),
        (json!([{"name": "x-a", "value": "a\r\nx-evil: 1"}]), "x-a"),
        (
            json!([{"name": "x-a", "value": "1"}, {"name": "X-A", "value": "2"}]),
            "x-a",
        ),
        (json!([{"name": "x a", "value": "1"}]), "x a"),
    ];
    for (headers, name) in bad_creates {
        let body = json!({"url": "https://hooks.example/in", "headers": headers});
        let (s, v) = app
            .post(
                "/v1/tenants/acme/endpoints",
                &app.writer,
                Some(&body.to_string()),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(
            v["detail"].as_str().unwrap_or_default().contains(name),
            "{name}: {v}"
        );
    }
    let (_, list) = app.get("/v1/tenants/acme/endpoints", &app.writer).await;
    assert_eq!(list["endpoints"], json!([]), "nothing created");

    let body =
        json!({"url": "https://hooks.example/in", "headers": [{"name": "x-keep", "value": "1"}]});
    let (s, created) = app
        .post(
            "/v1/tenants/acme/endpoints",
            &app.writer,
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let ep = format!(
        "/v1/tenants/acme/endpoints/{}",
        created["endpoint"]["id"].as_str().unwrap()
    );
    let (_, before) = app.get(&ep, &app.writer).await;
    let bad_patches = [
        (
            json!({"set_headers": [{"name": "user-agent", "value": "me"}], "description": "x"}),
            "user-agent",
        ),
        (json!({"remove_headers": ["x-missing"]}), "x-missing"),
        (
            json!({"headers": [{"name": "traceparent", "value": "00"}]}),
            "traceparent",
        ),
        (
            json!({"set_headers": [{"name": "x-b", "value": "1", "sealed": true}]}),
            "sealed",
        ),
    ];
    for (body, name) in bad_patches {
        let (s, v) = patch(&app, &ep, body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(v.to_string().contains(name), "{name}: {v}");
        let (_, now) = app.get(&ep, &app.writer).await;
        assert_eq!(now, before, "{name}: nothing changed");
    }
}
