//! The authentication and tenant matrix, bad input, the failed-authentication limit, and the
//! console's session and CSRF checks. On both stores where a store is involved.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt;
use outboxkit_core::DeliveryStatus;
use outboxkit_serve::ServeConfig;
use outboxkit_testing::WebhookReceiver;
use serde_json::Value;

use crate::common::{config, App};

/// A dead delivery, a pending one and an endpoint of `acme`: `(endpoint, dead delivery)`.
pub(crate) async fn seed(app: &App) -> (String, String) {
    let receiver = WebhookReceiver::start().await.unwrap();
    receiver.refuse(500);
    let ep = app.endpoint(&receiver.url()).await.to_string();
    app.enqueue("order.created", 1).await;
    app.dispatch_until(DeliveryStatus::Dead, 1).await;
    app.enqueue("order.created", 1).await;
    let (_, v) = app
        .get("/v1/tenants/acme/deliveries?status=dead", &app.writer)
        .await;
    (ep, v["deliveries"][0]["id"].as_str().unwrap().to_owned())
}

/// Every tenant route, with a body where it takes one, and whether it writes.
fn routes(ep: &str, d: &str) -> Vec<(Method, String, Option<&'static str>, bool)> {
    let t = "/v1/tenants/acme";
    vec![
        (Method::GET, format!("{t}/stats"), None, false),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{"n":1}}"#),
            true,
        ),
        (Method::GET, format!("{t}/endpoints"), None, false),
        (
            Method::POST,
            format!("{t}/endpoints"),
            Some(r#"{"url":"https://example.com/x"}"#),
            true,
        ),
        (Method::GET, format!("{t}/endpoints/{ep}"), None, false),
        (
            Method::PATCH,
            format!("{t}/endpoints/{ep}"),
            Some(r#"{"description":"x"}"#),
            true,
        ),
        (
            Method::POST,
            format!("{t}/endpoints/{ep}/pause"),
            None,
            true,
        ),
        (
            Method::POST,
            format!("{t}/endpoints/{ep}/resume"),
            None,
            true,
        ),
        (
            Method::POST,
            format!("{t}/endpoints/{ep}/rotate-secret"),
            None,
            true,
        ),
        (
            Method::POST,
            format!("{t}/endpoints/{ep}/release-held"),
            None,
            true,
        ),
        (Method::POST, format!("{t}/endpoints/{ep}/test"), None, true),
        (Method::GET, format!("{t}/deliveries"), None, false),
        (
            Method::POST,
            format!("{t}/deliveries/bulk"),
            Some(r#"{"action":"replay"}"#),
            true,
        ),
        (Method::GET, format!("{t}/deliveries/{d}"), None, false),
        (
            Method::POST,
            format!("{t}/deliveries/{d}/replay"),
            None,
            true,
        ),
        (
            Method::POST,
            format!("{t}/deliveries/{d}/retry"),
            None,
            true,
        ),
        (Method::DELETE, format!("{t}/endpoints/{ep}"), None, true),
    ]
}

/// What an outsider could compare: the stats, the endpoints and every delivery.
async fn snapshot(app: &App) -> Value {
    let (_, mut s) = app.get("/v1/tenants/acme/stats", &app.admin).await;
    // The age of the oldest due delivery grows with the clock.
    s.as_object_mut().unwrap().remove("oldest_due_age_ms");
    let (_, e) = app.get("/v1/tenants/acme/endpoints", &app.admin).await;
    let (_, d) = app.get("/v1/tenants/acme/deliveries", &app.admin).await;
    let mut e = e;
    for x in e["endpoints"].as_array_mut().unwrap() {
        x.as_object_mut().unwrap().remove("updated_at");
    }
    serde_json::json!([s, e, d])
}

async fn matrix(app: &App) {
    let (ep, d) = seed(app).await;
    let before = snapshot(app).await;
    let mut wrong = app.writer.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'A' { 'B' } else { 'A' });
    let unauthorized = [
        None,
        Some("nonsense"),
        Some(wrong.as_str()),
        Some(app.revoked.as_str()),
    ];
    for (method, path, body, write) in routes(&ep, &d) {
        let mut first_401: Option<Value> = None;
        for token in unauthorized {
            let (s, h, v) = app.call(method.clone(), &path, token, body).await;
            assert_eq!(
                s,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {token:?}: {v}"
            );
            assert_eq!(h[header::CONTENT_TYPE], "application/problem+json");
            assert_eq!(h[header::WWW_AUTHENTICATE], "Bearer");
            // The same answer whatever was wrong with the token.
            match &first_401 {
                None => first_401 = Some(v),
                Some(f) => assert_eq!(f, &v),
            }
        }
        // Another tenant's token: as if nothing were there.
        let (s, _, v) = app
            .call(method.clone(), &path, Some(&app.other), body)
            .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{method} {path}: {v}");
        assert_eq!(
            v,
            serde_json::to_value(outboxkit_serve::problem::Problem::not_found()).unwrap()
        );
        // An enqueue-only token may only enqueue (`messages.rs` tries that route with it).
        if !path.ends_with("/messages") {
            let (s, _, v) = app
                .call(method.clone(), &path, Some(&app.enqueuer), body)
                .await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{method} {path}: {v}");
            assert_eq!(v["detail"], "this token may only enqueue messages", "{v}");
        }
        if write {
            let (s, _, v) = app
                .call(method.clone(), &path, Some(&app.reader), body)
                .await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{method} {path}: {v}");
        } else {
            for token in [&app.reader, &app.writer, &app.admin] {
                let (s, _, v) = app.call(method.clone(), &path, Some(token), body).await;
                assert_eq!(s, StatusCode::OK, "{method} {path}: {v}");
            }
        }
    }
    assert_eq!(
        snapshot(app).await,
        before,
        "a refused request changed something"
    );
    // A missing delivery and another tenant's look the same.
    let (s1, v1) = app
        .get(&format!("/v1/tenants/other/deliveries/{d}"), &app.other)
        .await;
    let (s2, v2) = app
        .get(&format!("/v1/tenants/acme/deliveries/{d}"), &app.other)
        .await;
    assert_eq!((s1, &v1), (s2, &v2));
    assert_eq!(s1, StatusCode::NOT_FOUND);
    // The admin token reaches every tenant; a tenant name that is not valid is 404.
    let (s, _) = app.get("/v1/tenants/other/stats", &app.admin).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = app.get("/v1/tenants/NOT%20valid/stats", &app.admin).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn auth_matrix_on_sqlite() {
    matrix(&App::sqlite().await).await;
}

#[tokio::test]
async fn auth_matrix_on_postgres() {
    let Some(app) = App::postgres().await else {
        return;
    };
    matrix(&app).await;
    app.finish().await;
}

/// A bad request: method, path, body, the expected status and the field it names.
type Case = (
    Method,
    String,
    Option<String>,
    StatusCode,
    Option<&'static str>,
);

async fn bad_input(app: &App) {
    let (ep, d) = seed(app).await;
    let before = snapshot(app).await;
    let w = app.writer.as_str();
    let t = "/v1/tenants/acme";
    let big = format!(
        r#"{{"url":"https://example.com/x","description":"{}"}}"#,
        "x".repeat(70_000)
    );
    let cases: Vec<Case> = vec![
        (
            Method::GET,
            format!("{t}/deliveries/not-a-uuid"),
            None,
            StatusCode::BAD_REQUEST,
            Some("delivery_id"),
        ),
        (
            Method::POST,
            format!("{t}/deliveries/123/replay"),
            None,
            StatusCode::BAD_REQUEST,
            Some("delivery_id"),
        ),
        (
            Method::GET,
            format!("{t}/endpoints/zzz"),
            None,
            StatusCode::BAD_REQUEST,
            Some("endpoint_id"),
        ),
        (
            Method::GET,
            format!("{t}/deliveries?cursor=garbage"),
            None,
            StatusCode::BAD_REQUEST,
            Some("cursor"),
        ),
        (
            Method::GET,
            format!("{t}/deliveries?status=lost"),
            None,
            StatusCode::BAD_REQUEST,
            Some("status"),
        ),
        (
            Method::GET,
            format!("{t}/deliveries?limit=0"),
            None,
            StatusCode::BAD_REQUEST,
            Some("limit"),
        ),
        (
            Method::GET,
            format!("{t}/deliveries?limit=abc"),
            None,
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::GET,
            format!("{t}/deliveries?colour=red"),
            None,
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::GET,
            format!("{t}/deliveries?since=yesterday"),
            None,
            StatusCode::BAD_REQUEST,
            Some("since"),
        ),
        (
            Method::POST,
            format!("{t}/endpoints"),
            Some(r#"{"url":"https://example.com/x","colour":"red"}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/endpoints"),
            Some(r#"{"url":"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/endpoints"),
            Some(r#"{"url":"ftp://example.com/x"}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("url"),
        ),
        (
            Method::POST,
            format!("{t}/endpoints"),
            Some(r#"{"url":"https://example.com/x","secret":"nope"}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/endpoints"),
            Some(big),
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
        ),
        // Enqueue: the store's validation and limits, through the API; nothing is written.
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"Bad Topic","payload":{}}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("topic"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created"}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"tenant":"other"}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{"n":1"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"available_at":"yesterday"}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("available_at"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(
                r#"{"topic":"order.created","payload":{},"available_at":"2999-01-01T00:00:00Z"}"#
                    .into(),
            ),
            StatusCode::BAD_REQUEST,
            Some("available_at"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(
                r#"{"topic":"order.created","payload":{},"available_at":"2020-01-01T00:00:00Z"}"#
                    .into(),
            ),
            StatusCode::BAD_REQUEST,
            Some("available_at"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"delay":"-5m"}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("delay"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"delay":-5}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("delay"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"delay":"soon"}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("delay"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"delay":"400d"}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("delay"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(
                r#"{"topic":"order.created","payload":{},"delay":"5m","available_at":"2999-01-01T00:00:00Z"}"#
                    .into(),
            ),
            StatusCode::BAD_REQUEST,
            Some("delay"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"headers":{"bad name!":"x"}}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("headers"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(r#"{"topic":"order.created","payload":{},"ordering_key":""}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("ordering_key"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            // Over the store's 256 KiB payload limit, under the 320 KiB enqueue body limit.
            Some(format!(
                r#"{{"topic":"order.created","payload":"{}"}}"#,
                "x".repeat(256 * 1024)
            )),
            StatusCode::BAD_REQUEST,
            Some("payload"),
        ),
        (
            Method::POST,
            format!("{t}/messages"),
            Some(format!(
                r#"{{"topic":"order.created","payload":"{}"}}"#,
                "x".repeat(330 * 1024)
            )),
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
        ),
        (
            Method::PATCH,
            format!("{t}/endpoints/{ep}"),
            Some(r#"{"filter":"Bad Filter!"}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::PATCH,
            format!("{t}/endpoints/{ep}"),
            Some(r#"{"status":"active"}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/deliveries/bulk"),
            Some(r#"{"action":"explode"}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/deliveries/bulk"),
            Some(r#"{"action":"replay","max":0}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("max"),
        ),
        (
            Method::POST,
            format!("{t}/deliveries/bulk"),
            Some(r#"{"action":"replay","filter":{"status":"succeeded"}}"#.into()),
            StatusCode::BAD_REQUEST,
            Some("filter.status"),
        ),
        (
            Method::POST,
            format!("{t}/deliveries/bulk"),
            Some(r#"{"action":"replay","filter":{"limit":5}}"#.into()),
            StatusCode::BAD_REQUEST,
            None,
        ),
        (
            Method::POST,
            format!("{t}/deliveries/{d}/retry"),
            None,
            StatusCode::CONFLICT,
            None,
        ),
        (
            Method::GET,
            "/v1/nowhere".to_owned(),
            None,
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            Method::PUT,
            format!("{t}/stats"),
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            None,
        ),
    ];
    for (method, path, body, status, field) in cases {
        let (s, h, v) = app
            .call(method.clone(), &path, Some(w), body.as_deref())
            .await;
        assert_eq!(s, status, "{method} {path}: {v}");
        assert_eq!(
            h[header::CONTENT_TYPE],
            "application/problem+json",
            "{path}"
        );
        assert_eq!(v["status"], status.as_u16(), "{path}: {v}");
        assert!(v["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:outbox:problem:"));
        if let Some(f) = field {
            assert_eq!(v["field"], f, "{method} {path}: {v}");
        }
    }
    // A body that is not declared JSON.
    for (route, body) in [
        ("endpoints", "url=https://example.com"),
        ("messages", r#"{"topic":"order.created","payload":{}}"#),
    ] {
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("{t}/{route}"))
            .header("authorization", format!("Bearer {w}"))
            .header("content-type", "text/plain")
            .body(Body::from(body))
            .unwrap();
        let res = tower::ServiceExt::oneshot(app.router.clone(), req)
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{route}");
    }
    assert_eq!(snapshot(app).await, before, "bad input changed something");
}

#[tokio::test]
async fn bad_input_changes_nothing_on_sqlite() {
    bad_input(&App::sqlite().await).await;
}

#[tokio::test]
async fn bad_input_changes_nothing_on_postgres() {
    let Some(app) = App::postgres().await else {
        return;
    };
    bad_input(&app).await;
    app.finish().await;
}

#[tokio::test]
async fn failed_authentication_is_rate_limited() {
    let app = App::sqlite_with(ServeConfig {
        failed_auth_limit: 3,
        ..config()
    })
    .await;
    for _ in 0..3 {
        let (s, _) = app.get("/v1/tenants/acme/stats", "obx_nope").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    // A further guess is refused (a valid token is still accepted: see limiter.rs).
    let (s, h, v) = app
        .call(
            Method::GET,
            "/v1/tenants/acme/stats",
            Some("obx_nope"),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    let wait: u64 = h[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait));
    assert_eq!(v["retry_after"], wait);
    // A request without any token is not a guess and is not counted, nor let through.
    let (s, _, _) = app
        .call(Method::GET, "/v1/tenants/acme/stats", None, None)
        .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
}

pub(crate) async fn raw(
    app: &App,
    req: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let res = tower::ServiceExt::oneshot(app.router.clone(), req)
        .await
        .unwrap();
    let (s, h) = (res.status(), res.headers().clone());
    let b = res.into_body().collect().await.unwrap().to_bytes();
    (s, h, String::from_utf8_lossy(&b).into_owned())
}

#[tokio::test]
async fn console_sessions_csrf_and_headers() {
    let app = App::sqlite().await;
    let (ep, d) = seed(&app).await;
    // Without a session: to the login page.
    let (s, h, _) = raw(&app, Request::get("/console").body(Body::empty()).unwrap()).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h[header::LOCATION], "/console/login");
    // A wrong token: 401, no cookie.
    let login = |token: &str| {
        Request::post("/console/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("token={token}")))
            .unwrap()
    };
    let (s, h, _) = raw(&app, login("obx_wrong")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(h.get(header::SET_COOKIE).is_none());
    let (s, h, _) = raw(&app, login(&app.writer)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let cookie = h[header::SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(&app.writer),
        "the token is not in the cookie"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    let page = |path: &str| {
        Request::get(path)
            .header("cookie", &session)
            .body(Body::empty())
            .unwrap()
    };
    let (s, h, html) = raw(&app, page(&format!("/console/deliveries/{d}"))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h[header::CONTENT_SECURITY_POLICY], outboxkit_serve::CSP);
    // No inline script: only the console's own same-origin file (the page refresh).
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(html.contains("<script src=\"/console/static/console.js\" defer></script>"));
    assert!(
        !html.contains("whsec_") && !html.contains(&app.writer),
        "nothing secret"
    );
    assert!(
        html.contains("HTTP <span class=\"code\">500</span>"),
        "{html}"
    );
    let (s, _, html) = raw(&app, page("/console/endpoints")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(html.contains(&ep) && !html.contains("whsec_"));
    // An action with a wrong CSRF token changes nothing.
    let act = |csrf: &str| {
        Request::post("/console/act")
            .header("cookie", &session)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!(
                "csrf={csrf}&action=replay&target={d}&tenant=acme"
            )))
            .unwrap()
    };
    let (s, _, _) = raw(&app, act("0000")).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (_, dv) = app
        .get(&format!("/v1/tenants/acme/deliveries/{d}"), &app.writer)
        .await;
    assert_eq!(dv["delivery"]["status"], "dead");
    // The right one (read from the confirmation page) replays.
    let (_, _, confirm) = raw(
        &app,
        page(&format!(
            "/console/confirm?tenant=acme&action=replay&target={d}"
        )),
    )
    .await;
    let csrf = confirm
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let (s, h, _) = raw(&app, act(&csrf)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert!(h[header::LOCATION].to_str().unwrap().contains(&d));
    let (_, dv) = app
        .get(&format!("/v1/tenants/acme/deliveries/{d}"), &app.writer)
        .await;
    assert_eq!(dv["delivery"]["status"], "pending");
    // A revoked token ends its session.
    let all = app.tokens.list_tokens().await.unwrap();
    for t in all {
        app.tokens
            .revoke_token(
                t.id,
                outboxkit_core::Clock::now(&outboxkit_core::SystemClock),
            )
            .await
            .unwrap();
    }
    let (s, _, _) = raw(&app, page("/console")).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
}
