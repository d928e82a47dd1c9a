//! `POST /v1/tenants/{tenant}/messages`, on SQLite and on PostgreSQL: the payload is kept byte
//! for byte and delivered signed, the `Idempotency-Key` header makes a repeat a 200 with the
//! first id, the caller's `traceparent` is stored, and only tokens that may enqueue can.
//! (Every refusal of bad input, and every other route refusing an enqueue-only token, is in
//! `auth.rs`'s matrices.)

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt;
use outboxkit_core::{
    DeliveryStatus, MessageId, MessageStore, NewMessage, Traceparent, WebhookSecret,
};
use outboxkit_testing::WebhookReceiver;
use serde_json::Value;

use crate::common::App;

const URI: &str = "/v1/tenants/acme/messages";

/// POST `body` to `uri` with `token` and the given extra headers.
async fn send(
    app: &App,
    uri: &str,
    token: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json");
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let res = tower::ServiceExt::oneshot(
        app.router.clone(),
        req.body(Body::from(body.to_owned())).unwrap(),
    )
    .await
    .unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn message_id(v: &Value) -> MessageId {
    MessageId::parse(v["message_id"].as_str().expect("a message id")).expect("a UUIDv7")
}

async fn enqueue_over_http(app: &App) {
    // An endpoint that takes the payload as the body (raw), so the bytes can be compared.
    let receiver = WebhookReceiver::start().await.unwrap();
    let ep = serde_json::json!({ "url": receiver.url(), "body_format": "raw" }).to_string();
    let (s, v) = app
        .post("/v1/tenants/acme/endpoints", &app.writer, Some(&ep))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let secret = WebhookSecret::parse(v["secret"].as_str().unwrap()).unwrap();
    receiver.set_secrets(vec![secret]);

    // Whitespace, key order, a number past u64, a duplicate key and a decimal's trailing
    // zero: kept exactly as sent.
    let payload = r#"{ "total": 12.50,  "id": 18446744073709551617, "dup": 1, "dup": 2 }"#;
    let body = format!(
        r#"{{"topic":"order.created","payload":{payload},"ordering_key":"order-42","headers":{{"x-source":"billing"}}}}"#
    );
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (s, v) = send(
        app,
        URI,
        &app.enqueuer,
        &body,
        &[("idempotency-key", "order-42-created"), ("traceparent", tp)],
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        (v["deliveries"].as_u64(), v["duplicate"].as_bool()),
        (Some(1), Some(false))
    );
    let id = message_id(&v);
    let m = app
        .store
        .get_message(&app.tenant, id)
        .await
        .expect("stored");
    assert_eq!(String::from_utf8(m.payload.clone()).unwrap(), payload);
    assert_eq!(m.topic.as_str(), "order.created");
    assert_eq!(
        m.ordering_key.as_ref().map(|k| k.as_str()),
        Some("order-42")
    );
    assert_eq!(
        m.idempotency_key.as_ref().map(|k| k.as_str()),
        Some("order-42-created")
    );
    assert_eq!(
        m.headers.get("x-source").map(String::as_str),
        Some("billing")
    );
    assert_eq!(m.headers.get("traceparent").map(String::as_str), Some(tp));

    // The same key again: nothing written, the first id, 200.
    let (s, again) = send(
        app,
        URI,
        &app.enqueuer,
        &body,
        &[("idempotency-key", "order-42-created")],
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(message_id(&again), id);
    assert_eq!(
        (again["deliveries"].as_u64(), again["duplicate"].as_bool()),
        (Some(0), Some(true))
    );
    // The same key as an enqueue from Rust: the key is one namespace, whoever writes.
    let rust = app
        .store
        .enqueue(
            NewMessage::raw("order.created", payload.as_bytes().to_vec())
                .tenant("acme")
                .idempotency_key("order-42-created"),
        )
        .await
        .unwrap();
    assert!(rust.duplicate);
    assert_eq!(rust.message_id, id);

    // Headers of its own win over the request's; a malformed request traceparent is
    // ignored (W3C), not refused. Full and admin tokens may enqueue too.
    let own = "00-11111111111111111111111111111111-2222222222222222-01";
    let body = format!(
        r#"{{"topic":"order.shipped","payload":[1, 2],"headers":{{"traceparent":"{own}"}},"delay":0}}"#
    );
    let (s, v) = send(app, URI, &app.writer, &body, &[("traceparent", tp)]).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let shipped = app
        .store
        .get_message(&app.tenant, message_id(&v))
        .await
        .unwrap();
    assert_eq!(
        shipped.headers.get("traceparent").map(String::as_str),
        Some(own)
    );
    assert_eq!(shipped.payload, b"[1, 2]");
    let (s, v) = send(
        app,
        URI,
        &app.admin,
        r#"{"topic":"order.paid","payload":"paid"}"#,
        &[("traceparent", "not-a-trace")],
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let paid = app
        .store
        .get_message(&app.tenant, message_id(&v))
        .await
        .unwrap();
    assert!(
        !paid.headers.contains_key("traceparent"),
        "{:?}",
        paid.headers
    );
    assert!(Traceparent::parse("not-a-trace").is_err());

    // Delivered, signed, byte for byte.
    app.dispatch_until(DeliveryStatus::Succeeded, 3).await;
    let requests = receiver.requests();
    assert_eq!(requests.len(), 3, "each message once");
    assert!(requests.iter().all(|r| r.verified()), "signed");
    let bodies: Vec<String> = requests.iter().map(|r| r.text()).collect();
    for want in [payload, "[1, 2]", "\"paid\""] {
        assert!(bodies.iter().any(|b| b == want), "{want}: {bodies:?}");
    }
}

#[tokio::test]
async fn enqueue_over_http_on_sqlite() {
    enqueue_over_http(&App::sqlite().await).await;
}

#[tokio::test]
async fn enqueue_over_http_on_postgres() {
    let Some(app) = App::postgres().await else {
        return;
    };
    enqueue_over_http(&app).await;
    app.finish().await;
}

/// Who may enqueue: a full or an enqueue-only token of the tenant, or an admin token; a
/// read-only token is 403, another tenant's 404, a bad key header 400 — none writes.
#[tokio::test]
async fn only_tokens_that_may_enqueue_can() {
    let app = App::sqlite().await;
    // An endpoint, so a message that were written would show as a delivery.
    let receiver = WebhookReceiver::start().await.unwrap();
    app.endpoint(&receiver.url()).await;
    let body = r#"{"topic":"order.created","payload":{}}"#;
    let (s, v) = send(&app, URI, &app.reader, body, &[]).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["detail"], "this token is read-only");
    let (s, v) = send(&app, URI, &app.other, body, &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = send(&app, "/v1/tenants/other/messages", &app.enqueuer, body, &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = send(&app, URI, &app.revoked, body, &[]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    let long = "k".repeat(300);
    let (s, v) = send(
        &app,
        URI,
        &app.enqueuer,
        body,
        &[("idempotency-key", &long)],
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["field"], "idempotency_key", "{v}");
    let (s, v) = app.get("/v1/tenants/acme/stats", &app.admin).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["total"], 0, "nothing was written: {v}");
    // The enqueue-only token itself works (and is refused everywhere else: `auth.rs`).
    let (s, v) = send(&app, URI, &app.enqueuer, body, &[]).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["deliveries"], 1, "{v}");
}

/// `delay` (a duration text or whole seconds) and `available_at` set the message's time; a
/// resume of a paused endpoint keeps it (the store's release rule, through the API).
#[tokio::test]
async fn delayed_send_over_http() {
    use outboxkit_core::{Clock, DeliveryFilter, Ledger, SystemClock};
    use std::time::Duration;
    let app = App::sqlite().await;
    let receiver = WebhookReceiver::start().await.unwrap();
    let ep = app.endpoint(&receiver.url()).await;
    let paused = format!("/v1/tenants/acme/endpoints/{ep}/pause");
    let (s, v) = app.post(&paused, &app.writer, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let cases = [
        (r#"{"topic":"a.b","payload":{},"delay":"10m"}"#, 600),
        (r#"{"topic":"a.b","payload":{},"delay":90}"#, 90),
        (r#"{"topic":"a.b","payload":{},"delay":"1h 30m"}"#, 5400),
    ];
    for (body, secs) in cases {
        let before = SystemClock.now();
        let (s, v) = send(&app, URI, &app.enqueuer, body, &[]).await;
        let after = SystemClock.now();
        assert_eq!(s, StatusCode::CREATED, "{body}: {v}");
        let m = app
            .store
            .get_message(&app.tenant, message_id(&v))
            .await
            .unwrap();
        let d = Duration::from_secs(secs);
        assert!(
            m.available_at >= before.saturating_add(d) && m.available_at <= after.saturating_add(d),
            "{body}: {}",
            m.available_at
        );
    }
    let at = SystemClock
        .now()
        .saturating_add(Duration::from_secs(86_400));
    let body = format!(
        r#"{{"topic":"a.b","payload":{{}},"available_at":"{}"}}"#,
        at.to_rfc3339()
    );
    let (s, v) = send(&app, URI, &app.enqueuer, &body, &[]).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let at_id = message_id(&v);
    let m = app.store.get_message(&app.tenant, at_id).await.unwrap();
    assert_eq!(m.available_at, at);
    let resume = format!("/v1/tenants/acme/endpoints/{ep}/resume");
    let (s, v) = app.post(&resume, &app.writer, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let page = app
        .store
        .list_deliveries(
            &app.tenant,
            &DeliveryFilter::default(),
            outboxkit_core::PageRequest::first(100),
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 4);
    for d in &page.items {
        let m = app
            .store
            .get_message(&app.tenant, d.message_id)
            .await
            .unwrap();
        assert_eq!(
            (d.status, d.next_attempt_at),
            (DeliveryStatus::Pending, m.available_at),
            "resumed, each keeps its own time"
        );
    }
}
