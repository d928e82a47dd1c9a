//! The attempt in full through `GET /v1/tenants/{tenant}/deliveries/{id}`: the payload
//! once, and per attempt the request headers as sent (secret values redacted), the
//! response's headers and body, the timings and the address, on SQLite and PostgreSQL.

use axum::http::StatusCode;
use base64::Engine as _;
use outboxkit_core::DeliveryStatus;
use outboxkit_testing::{Reply, WebhookReceiver};
use serde_json::{json, Value};

use crate::common::App;

fn header<'a>(headers: &'a Value, name: &str) -> Option<&'a str> {
    headers
        .as_array()?
        .iter()
        .find(|h| h["name"] == name)
        .and_then(|h| h["value"].as_str())
}

async fn the_attempt_in_full(app: &App) {
    let receiver = WebhookReceiver::start().await.unwrap();
    let hostile = "<script>alert(1)</script>\u{1b}[31m";
    receiver.script([Reply::Body(500, hostile.into()), Reply::Status(204)]);
    let body = json!({
        "url": receiver.url(),
        "headers": [
            {"name": "X-Api-Key", "value": "key-one", "secret": true},
            {"name": "X-Route", "value": "eu"},
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
    app.enqueue("order.created", 1).await;
    app.dispatch_until(DeliveryStatus::Succeeded, 1).await;
    let (_, page) = app.get("/v1/tenants/acme/deliveries", &app.reader).await;
    let id = page["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let (s, shown) = app
        .get(&format!("/v1/tenants/acme/deliveries/{id}"), &app.reader)
        .await;
    assert_eq!(s, StatusCode::OK, "{shown}");

    // The payload once, with the reference every attempt names.
    let payload = &shown["payload"];
    assert_eq!(payload["json"], json!({"n": 0}));
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(payload["base64"].as_str().unwrap())
            .unwrap(),
        br#"{"n":0}"#
    );
    let attempts = shown["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{shown}");
    for a in attempts {
        assert_eq!(a["payload"]["sha256"], payload["sha256"]);
        assert_eq!(a["payload"]["size"], payload["size"]);
    }

    // The first attempt: what was sent, byte for byte as the receiver saw it.
    let sent = &receiver.requests()[0];
    let first = &attempts[0]["detail"];
    let req = &first["request_headers"];
    assert_eq!(
        header(req, "webhook-signature"),
        sent.header("webhook-signature")
    );
    assert_eq!(header(req, "webhook-id"), Some(id.as_str()));
    assert_eq!(header(req, "x-api-key"), Some("[redacted]"));
    assert_eq!(sent.header("x-api-key"), Some("key-one"));
    assert_eq!(header(req, "x-route"), Some("eu"));
    assert!(!shown.to_string().contains("key-one"), "{shown}");
    // And what came back.
    assert_eq!(attempts[0]["status_code"], 500);
    assert_eq!(first["response_body_text"], hostile);
    assert_eq!(first["response_body_size"], hostile.len());
    assert_eq!(first["response_body_truncated"], false);
    assert!(header(&first["response_headers"], "content-length").is_some());
    assert_eq!(
        first["remote_addr"].as_str(),
        Some(receiver.addr().to_string().as_str())
    );
    assert!(first["timing"]["total_us"].as_u64().is_some());
    assert!(first["timing"]["first_byte_us"].as_u64().is_some());
    // The retry: a 204 with an empty body.
    assert_eq!(attempts[1]["status_code"], 204);
    assert_eq!(attempts[1]["detail"]["response_body_base64"], "");
}

#[tokio::test]
async fn a_delivery_shows_each_attempt_in_full_on_sqlite() {
    the_attempt_in_full(&App::sqlite().await).await;
}

#[tokio::test]
async fn a_delivery_shows_each_attempt_in_full_on_postgres() {
    let Some(app) = App::postgres().await else {
        return;
    };
    the_attempt_in_full(&app).await;
    app.finish().await;
}
