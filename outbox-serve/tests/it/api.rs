//! Every API route, on SQLite and on PostgreSQL.

use axum::http::{Method, StatusCode};
use outboxkit_core::DeliveryStatus;
use outboxkit_testing::WebhookReceiver;

use crate::common::App;

async fn every_route(app: &App) {
    let w = &app.writer;
    let receiver = WebhookReceiver::start().await.unwrap();

    // health, without a token
    let (s, _, v) = app.call(Method::GET, "/v1/health", None, None).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ok")));

    // endpoints: create (secret shown once), list, show, update
    let body = serde_json::json!({
        "url": receiver.url(), "description": "orders", "filter": "order.*", "rate_limit": 50,
        "fifo": true
    })
    .to_string();
    let (s, created) = app.post("/v1/tenants/acme/endpoints", w, Some(&body)).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"));
    let id = created["endpoint"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["endpoint"]["filter"], "order.*");
    assert_eq!(created["endpoint"]["fifo"], true);
    let (s, list) = app.get("/v1/tenants/acme/endpoints", w).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["endpoints"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(secret), "no secret in listings");
    let ep = format!("/v1/tenants/acme/endpoints/{id}");
    let (s, shown) = app.get(&ep, w).await;
    assert_eq!(
        (s, shown["description"].as_str()),
        (StatusCode::OK, Some("orders"))
    );
    assert!(!shown.to_string().contains(secret));
    assert_eq!(shown["fifo"], true);
    let (s, _, updated) = app
        .call(
            Method::PATCH,
            &ep,
            Some(w),
            Some(r#"{"description":"all orders","filter":"order.*,invoice.paid","rate_limit":0,"fifo":false}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{updated}");
    assert_eq!(updated["description"], "all orders");
    assert_eq!(updated["rate_limit"], serde_json::Value::Null);
    assert_eq!(updated["fifo"], false);
    let (_, doc) = app.get("/v1/openapi.json", w).await;
    for schema in ["EndpointView", "NewEndpointBody", "EndpointPatch"] {
        let props = &doc["components"]["schemas"][schema]["properties"];
        assert!(
            props["fifo"].is_object(),
            "{schema} has fifo in the OpenAPI document"
        );
    }

    // test event: signed with the secret just shown
    let (s, tested) = app.post(&format!("{ep}/test"), w, None).await;
    assert_eq!(s, StatusCode::OK, "{tested}");
    assert_eq!(tested["status_code"], 200);
    assert_eq!(receiver.count(), 1);

    // pause and resume
    let (s, paused) = app.post(&format!("{ep}/pause"), w, None).await;
    assert_eq!(
        (s, paused["status"].as_str()),
        (StatusCode::OK, Some("paused"))
    );
    let (s, resumed) = app.post(&format!("{ep}/resume"), w, None).await;
    assert_eq!(
        (s, resumed["status"].as_str()),
        (StatusCode::OK, Some("active"))
    );

    // deliveries: two dead after the receiver refuses, one pending
    receiver.refuse(500);
    app.enqueue("order.created", 2).await;
    app.dispatch_until(DeliveryStatus::Dead, 2).await;
    app.enqueue("invoice.paid", 1).await;

    let (s, page) = app.get("/v1/tenants/acme/deliveries?limit=2", w).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(page["deliveries"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let (s, page2) = app
        .get(
            &format!("/v1/tenants/acme/deliveries?limit=2&cursor={cursor}"),
            w,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(page2["deliveries"].as_array().unwrap().len(), 1);
    assert_eq!(page2["next_cursor"], serde_json::Value::Null);
    let (s, dead) = app
        .get(
            &format!("/v1/tenants/acme/deliveries?status=dead&endpoint={id}&topic=order.created"),
            w,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let dead = dead["deliveries"].as_array().unwrap().clone();
    assert_eq!(dead.len(), 2);
    let dead_id = dead[0]["id"].as_str().unwrap().to_owned();

    // show with the ledger
    let (s, detail) = app
        .get(&format!("/v1/tenants/acme/deliveries/{dead_id}"), w)
        .await;
    assert_eq!(s, StatusCode::OK);
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["status_code"], 500);

    // bulk, dry: lists and changes nothing
    let (s, dry) = app
        .post(
            "/v1/tenants/acme/deliveries/bulk",
            w,
            Some(r#"{"action":"replay","dry_run":true}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{dry}");
    assert_eq!(dry["matched"].as_array().unwrap().len(), 2);
    assert_eq!(dry["changed"], 0);
    let (_, stats) = app.get("/v1/tenants/acme/stats", w).await;
    assert_eq!(stats["dead"], 2);

    // replay one, then retry it while pending, then bulk-replay the other
    let (s, r) = app
        .post(
            &format!("/v1/tenants/acme/deliveries/{dead_id}/replay"),
            w,
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (s, again) = app
        .post(
            &format!("/v1/tenants/acme/deliveries/{dead_id}/replay"),
            w,
            None,
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{again}");
    let (s, r) = app
        .post(
            &format!("/v1/tenants/acme/deliveries/{dead_id}/retry"),
            w,
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (s, bulk) = app
        .post(
            "/v1/tenants/acme/deliveries/bulk",
            w,
            Some(r#"{"action":"replay","filter":{"topic":"order.created"}}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{bulk}");
    assert_eq!(bulk["changed"], 1);
    let (_, stats) = app.get("/v1/tenants/acme/stats", w).await;
    assert_eq!(
        (stats["dead"].as_u64(), stats["pending"].as_u64()),
        (Some(0), Some(3))
    );

    // release-held (nothing held) and rotate-secret (a new secret, shown once)
    let (s, rel) = app.post(&format!("{ep}/release-held"), w, None).await;
    assert_eq!((s, rel["changed"].as_u64()), (StatusCode::OK, Some(0)));
    let (s, rotated) = app.post(&format!("{ep}/rotate-secret"), w, None).await;
    assert_eq!(s, StatusCode::OK, "{rotated}");
    assert_ne!(rotated["secret"].as_str(), Some(secret));
    assert_eq!(rotated["endpoint"]["rotation_in_progress"], true);

    // delete
    let (s, _, _) = app.call(Method::DELETE, &ep, Some(w), None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, gone) = app.get(&ep, w).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(gone["type"], "urn:outbox:problem:not-found");

    // the document
    let (s, doc) = app.get("/v1/openapi.json", w).await;
    assert_eq!(
        (s, doc["openapi"].as_str()),
        (StatusCode::OK, Some("3.1.0"))
    );
}

#[tokio::test]
async fn every_route_on_sqlite() {
    every_route(&App::sqlite().await).await;
}

#[tokio::test]
async fn every_route_on_postgres() {
    let Some(app) = App::postgres().await else {
        return;
    };
    every_route(&app).await;
    app.finish().await;
}
