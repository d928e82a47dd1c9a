//! Cancel over the API, on SQLite and PostgreSQL: one delivery, a whole message and a bulk
//! action; a finished delivery is a 409 problem, another tenant's a 404, a read-only token
//! is refused, and a cancelled delivery can be replayed.

use axum::http::StatusCode;
use outboxkit_testing::WebhookReceiver;
use serde_json::Value;

use crate::common::App;

async fn cancel_routes(app: &App) {
    let (w, r, o) = (&app.writer, &app.reader, &app.other);
    let receiver = WebhookReceiver::start().await.unwrap();
    app.endpoint(&receiver.url()).await;
    app.enqueue("order.created", 3).await;
    let (s, page) = app.get("/v1/tenants/acme/deliveries", w).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    let all = page["deliveries"].as_array().unwrap().clone();
    assert_eq!(all.len(), 3);
    let id = |i: usize| all[i]["id"].as_str().unwrap().to_owned();
    let message = |i: usize| all[i]["message_id"].as_str().unwrap().to_owned();
    let one = format!("/v1/tenants/acme/deliveries/{}/cancel", id(0));

    // Refused without changing anything: read-only, another tenant, unknown or bad ids.
    let (s, p) = app.post(&one, r, None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{p}");
    let (s, p) = app
        .post(
            &format!("/v1/tenants/other/deliveries/{}/cancel", id(0)),
            o,
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{p}");
    let (s, p) = app
        .post("/v1/tenants/acme/deliveries/not-an-id/cancel", w, None)
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{p}");
    let (_, stats) = app.get("/v1/tenants/acme/stats", w).await;
    assert_eq!(
        (stats["pending"].as_u64(), stats["dead"].as_u64()),
        (Some(3), Some(0))
    );

    // One delivery: dead (cancelled); a second cancel is a 409 problem that says why.
    let (s, v) = app.post(&one, w, None).await;
    assert_eq!((s, &v["changed"]), (StatusCode::OK, &Value::from(1)), "{v}");
    let (_, shown) = app
        .get(&format!("/v1/tenants/acme/deliveries/{}", id(0)), w)
        .await;
    assert_eq!(shown["delivery"]["status"], "dead", "{shown}");
    assert_eq!(shown["delivery"]["dead_reason"], "cancelled", "{shown}");
    let (s, p) = app.post(&one, w, None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{p}");
    assert_eq!(p["type"], "urn:outbox:problem:conflict", "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("already finished"),
        "{p}"
    );

    // A whole message: refused for a reader and another tenant, then cancelled.
    let msg = format!("/v1/tenants/acme/messages/{}/cancel", message(1));
    let (s, p) = app.post(&msg, r, None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{p}");
    let (s, p) = app
        .post(
            &format!("/v1/tenants/other/messages/{}/cancel", message(1)),
            o,
            None,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{p}");
    let (s, p) = app
        .post("/v1/tenants/acme/messages/not-an-id/cancel", w, None)
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{p}");
    let (s, v) = app.post(&msg, w, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["cancelled"].as_u64(), v["skipped"].as_u64()),
        (Some(1), Some(0))
    );
    let (s, v) = app.post(&msg, w, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["cancelled"].as_u64(), v["skipped"].as_u64()),
        (Some(0), Some(1))
    );

    // Bulk: a dry run lists the last pending one, then it is cancelled; dead is refused.
    let bulk = "/v1/tenants/acme/deliveries/bulk";
    let (s, dry) = app
        .post(bulk, w, Some(r#"{"action":"cancel","dry_run":true}"#))
        .await;
    assert_eq!(s, StatusCode::OK, "{dry}");
    assert_eq!(dry["matched"], serde_json::json!([id(2)]), "{dry}");
    assert_eq!(dry["changed"], 0);
    let (s, p) = app
        .post(
            bulk,
            w,
            Some(r#"{"action":"cancel","filter":{"status":"dead"}}"#),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{p}");
    let (s, done) = app.post(bulk, w, Some(r#"{"action":"cancel"}"#)).await;
    assert_eq!(s, StatusCode::OK, "{done}");
    assert_eq!(done["changed"], 1, "{done}");
    let (_, stats) = app.get("/v1/tenants/acme/stats", w).await;
    assert_eq!(
        (stats["pending"].as_u64(), stats["dead"].as_u64()),
        (Some(0), Some(3))
    );

    // A cancelled delivery is dead: replay sends it again.
    let (s, v) = app
        .post(
            &format!("/v1/tenants/acme/deliveries/{}/replay", id(0)),
            w,
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, stats) = app.get("/v1/tenants/acme/stats", w).await;
    assert_eq!(
        (stats["pending"].as_u64(), stats["dead"].as_u64()),
        (Some(1), Some(2))
    );
}

#[tokio::test]
async fn cancel_on_sqlite() {
    cancel_routes(&App::sqlite().await).await;
}

#[tokio::test]
async fn cancel_on_postgres() {
    let Some(app) = App::postgres().await else {
        return;
    };
    cancel_routes(&app).await;
    app.finish().await;
}
