//! The console as an operator uses it: an admin token acting on any tenant, rotating a
//! secret (shown once, a second rotation refused unless forced, a rotation finished), login
//! from another origin refused, and a bounded session table.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use outboxkit_core::{EndpointId, EndpointStore, TenantId};
use outboxkit_serve::ServeConfig;

use crate::auth::{raw, seed};
use crate::common::{config, App};

/// A form POST.
pub(crate) fn form(path: &str, cookie: Option<&str>, body: String) -> Request<Body> {
    let mut r = Request::post(path).header("content-type", "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        r = r.header("cookie", c);
    }
    r.body(Body::from(body)).unwrap()
}

/// Log in with `token`: the session cookie (`name=value`).
pub(crate) async fn login(app: &App, token: &str) -> String {
    let (s, h, body) = raw(app, form("/console/login", None, format!("token={token}"))).await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{body}");
    h[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

pub(crate) fn get(path: &str, cookie: &str) -> Request<Body> {
    Request::get(path)
        .header("cookie", cookie)
        .body(Body::empty())
        .unwrap()
}

/// The CSRF token of a console page.
pub(crate) fn csrf_of(html: &str) -> String {
    html.split("name=\"csrf\" value=\"")
        .nth(1)
        .expect("a form with a CSRF token")
        .split('"')
        .next()
        .unwrap()
        .to_owned()
}

/// Submit an action through the console (reading the CSRF token from the confirmation
/// page first): `(status, headers, html)`.
pub(crate) async fn act(
    app: &App,
    cookie: &str,
    tenant: &str,
    action: &str,
    target: &str,
    extra: &str,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let (s, _, confirm) = raw(
        app,
        get(
            &format!("/console/confirm?tenant={tenant}&action={action}&target={target}"),
            cookie,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{confirm}");
    let csrf = csrf_of(&confirm);
    raw(
        app,
        form(
            "/console/act",
            Some(cookie),
            format!("csrf={csrf}&action={action}&target={target}&tenant={tenant}{extra}"),
        ),
    )
    .await
}

#[tokio::test]
async fn an_admin_token_acts_on_any_tenant_in_the_console() {
    let app = App::sqlite().await;
    let (ep, d) = seed(&app).await;
    let cookie = login(&app, &app.admin).await;
    let (s, h, html) = act(&app, &cookie, "acme", "replay", &d, "").await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    let to = h[header::LOCATION].to_str().unwrap();
    assert!(to.contains(&d) && to.contains("tenant=acme"), "{to}");
    let (_, dv) = app
        .get(&format!("/v1/tenants/acme/deliveries/{d}"), &app.writer)
        .await;
    assert_eq!(dv["delivery"]["status"], "pending");
    let (s, _, html) = act(&app, &cookie, "acme", "pause", &ep, "").await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    let (_, e) = app
        .get(&format!("/v1/tenants/acme/endpoints/{ep}"), &app.writer)
        .await;
    assert_eq!(e["status"], "paused");
    // A tenant token still cannot reach another tenant through the form.
    let other = login(&app, &app.other).await;
    let (s, _, _) = raw(
        &app,
        get(
            &format!("/console/confirm?tenant=acme&action=resume&target={ep}"),
            &other,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = act(&app, &other, "acme", "resume", &ep, "").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, e) = app
        .get(&format!("/v1/tenants/acme/endpoints/{ep}"), &app.writer)
        .await;
    assert_eq!(e["status"], "paused");
}

/// The `whsec_…` secret shown on a page.
fn shown_secret(html: &str) -> String {
    html.split("id=\"new-secret\">")
        .nth(1)
        .expect("the new secret is shown")
        .split('<')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn rotating_in_the_console_shows_the_secret_once_and_needs_force_to_repeat() {
    let app = App::sqlite().await;
    let ep = app.endpoint("https://example.com/hooks").await;
    let acme = TenantId::new("acme").unwrap();
    let cookie = login(&app, &app.writer).await;
    let id = ep.to_string();
    let (s, _, html) = act(&app, &cookie, "acme", "rotate", &id, "").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    let secret = shown_secret(&html);
    assert!(secret.starts_with("whsec_"), "{secret}");
    // It is the secret that now signs (the plaintext vault stores it as given).
    let e = app.store.get_endpoint(&acme, ep).await.unwrap();
    assert!(e.previous_secret.is_some());
    // Shown once: no other page carries it.
    for path in ["/console/endpoints?tenant=acme", "/console?tenant=acme"] {
        let (_, _, page) = raw(&app, get(path, &cookie)).await;
        assert!(
            !page.contains(&secret) && !page.contains("whsec_"),
            "{path}"
        );
    }
    // A second rotation while one is in progress is refused and changes nothing.
    let (s, _, html) = act(&app, &cookie, "acme", "rotate", &id, "").await;
    assert_eq!(s, StatusCode::CONFLICT, "{html}");
    assert!(html.contains("rotation in progress"), "{html}");
    let after = app.store.get_endpoint(&acme, ep).await.unwrap();
    assert_eq!(after.secret, e.secret);
    assert_eq!(after.previous_secret, e.previous_secret);
    // Forced, it rotates (the oldest secret is dropped).
    let (s, _, html) = act(&app, &cookie, "acme", "rotate", &id, "&force=1").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    let forced = shown_secret(&html);
    assert!(forced.starts_with("whsec_") && forced != secret);
    let after = app.store.get_endpoint(&acme, ep).await.unwrap();
    assert_eq!(after.previous_secret.as_ref(), Some(&e.secret));
    // Finishing the rotation drops the previous secret; a new rotation then needs no force.
    let (s, _, html) = act(&app, &cookie, "acme", "finish-rotation", &id, "").await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    let done = app.store.get_endpoint(&acme, ep).await.unwrap();
    assert!(done.previous_secret.is_none());
    let (s, _, html) = act(&app, &cookie, "acme", "rotate", &id, "").await;
    assert_eq!(s, StatusCode::OK, "{html}");
    let _ = EndpointId::parse(&id).unwrap();
}

#[tokio::test]
async fn login_from_another_origin_is_refused() {
    let app = App::sqlite().await;
    let login_from = |origin: Option<&str>, site: Option<&str>| {
        let mut r = Request::post("/console/login")
            .header("host", "127.0.0.1:8080")
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        if let Some(s) = site {
            r = r.header("sec-fetch-site", s);
        }
        r.body(Body::from(format!("token={}", app.other))).unwrap()
    };
    for (origin, site) in [
        (Some("https://evil.example"), Some("cross-site")),
        (Some("https://evil.example"), None),
        (None, Some("cross-site")),
        (None, Some("same-site")),
        (Some("null"), None),
    ] {
        let (s, h, _) = raw(&app, login_from(origin, site)).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{origin:?} {site:?}");
        assert!(h.get(header::SET_COOKIE).is_none(), "{origin:?} {site:?}");
    }
    // The console's own login form, and a client that sends neither header, still log in.
    for (origin, site) in [
        (Some("http://127.0.0.1:8080"), Some("same-origin")),
        (Some("http://127.0.0.1:8080"), None),
        (None, None),
    ] {
        let (s, h, _) = raw(&app, login_from(origin, site)).await;
        assert_eq!(s, StatusCode::SEE_OTHER, "{origin:?} {site:?}");
        assert!(h.get(header::SET_COOKIE).is_some());
    }
}

#[tokio::test]
async fn a_token_keeps_at_most_sixteen_sessions_oldest_ended_first() {
    let app = App::sqlite().await;
    let mut cookies = Vec::new();
    for _ in 0..outboxkit_core::MAX_SESSIONS_PER_TOKEN + 2 {
        cookies.push(login(&app, &app.writer).await);
    }
    // Another token's session is not one of them.
    let other = login(&app, &app.reader).await;
    for (i, c) in cookies.iter().enumerate() {
        let (s, h, _) = raw(&app, get("/console", c)).await;
        if i < 2 {
            assert_eq!(s, StatusCode::SEE_OTHER, "session {i} was evicted");
            assert_eq!(h[header::LOCATION], "/console/login");
        } else {
            assert_eq!(s, StatusCode::OK, "session {i} is kept");
        }
    }
    assert_eq!(raw(&app, get("/console", &other)).await.0, StatusCode::OK);
}

/// A request from `ip`.
pub(crate) fn from(ip: [u8; 4], mut r: Request<Body>) -> Request<Body> {
    r.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    r
}

#[tokio::test]
async fn an_enqueue_only_token_cannot_log_in() {
    let app = App::sqlite().await;
    let (s, h, body) = raw(
        &app,
        form("/console/login", None, format!("token={}", app.enqueuer)),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
    assert!(h.get(header::SET_COOKIE).is_none(), "no session");
    assert!(body.contains("may only enqueue"), "{body}");
    // A read-only token still logs in (read-only in the console).
    login(&app, &app.reader).await;
}

#[tokio::test]
async fn the_endpoints_page_shows_a_strict_fifo_endpoint() {
    let app = App::sqlite().await;
    let ep = app.endpoint("https://example.com/hooks").await;
    let acme = TenantId::new("acme").unwrap();
    let cookie = login(&app, &app.writer).await;
    let (_, _, before) = raw(&app, get("/console/endpoints?tenant=acme", &cookie)).await;
    assert!(!before.contains("strict FIFO"), "{before}");
    let on = outboxkit_core::EndpointUpdate {
        fifo: Some(true),
        ..Default::default()
    };
    app.store.update_endpoint(&acme, ep, &on).await.unwrap();
    let (_, _, after) = raw(&app, get("/console/endpoints?tenant=acme", &cookie)).await;
    assert!(after.contains("strict FIFO"), "{after}");
}

/// A pending delivery's page offers Cancel behind a confirmation (which changes nothing);
/// confirming makes it dead (`cancelled`) and the page then offers Replay; cancelling it
/// again shows the conflict; a read-only session gets no Cancel and is refused.
#[tokio::test]
async fn cancelling_a_pending_delivery_in_the_console() {
    let app = App::sqlite().await;
    let receiver = outboxkit_testing::WebhookReceiver::start().await.unwrap();
    app.endpoint(&receiver.url()).await;
    app.enqueue("order.created", 1).await;
    let (_, v) = app
        .get("/v1/tenants/acme/deliveries?status=pending", &app.writer)
        .await;
    let d = v["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let status = || async {
        let (_, dv) = app
            .get(&format!("/v1/tenants/acme/deliveries/{d}"), &app.writer)
            .await;
        (
            dv["delivery"]["status"].as_str().unwrap().to_owned(),
            dv["delivery"]["dead_reason"].clone(),
        )
    };
    let page_of = format!("/console/deliveries/{d}?tenant=acme");

    // A read-only session sees no Cancel and cannot confirm one.
    let reader = login(&app, &app.reader).await;
    let (s, _, html) = raw(&app, get(&page_of, &reader)).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(!html.contains("id=\"action-cancel\""), "{html}");
    let (s, _, _) = raw(
        &app,
        get(
            &format!("/console/confirm?tenant=acme&action=cancel&target={d}"),
            &reader,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    let cookie = login(&app, &app.writer).await;
    let (s, _, html) = raw(&app, get(&page_of, &cookie)).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(html.contains("id=\"action-cancel\""), "{html}");
    let (s, _, confirm) = raw(
        &app,
        get(
            &format!("/console/confirm?tenant=acme&action=cancel&target={d}"),
            &cookie,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{confirm}");
    assert!(confirm.contains("Cancel delivery"), "{confirm}");
    assert_eq!(
        status().await.0,
        "pending",
        "the confirmation changes nothing"
    );

    let (s, h, html) = act(&app, &cookie, "acme", "cancel", &d, "").await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    assert!(h[header::LOCATION].to_str().unwrap().contains(&d));
    assert_eq!(
        status().await,
        ("dead".to_owned(), serde_json::Value::from("cancelled"))
    );
    let (_, _, html) = raw(&app, get(&page_of, &cookie)).await;
    assert!(!html.contains("id=\"action-cancel\""), "{html}");
    assert!(html.contains("id=\"action-replay\""), "{html}");

    let (s, _, html) = act(&app, &cookie, "acme", "cancel", &d, "").await;
    assert_eq!(s, StatusCode::CONFLICT, "{html}");
    assert!(html.contains("already finished"), "{html}");
}

/// The event-types page lists the catalogue with its mode, descriptions and schemas, all
/// escaped (a description or schema string holding markup is shown as text).
#[tokio::test]
async fn the_event_types_page_shows_the_catalogue_escaped() {
    let app = App::sqlite().await;
    let cookie = login(&app, &app.reader).await;
    let (s, _, html) = raw(&app, get("/console/event-types?tenant=acme", &cookie)).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(
        html.contains("No event type is registered") && html.contains(">off<"),
        "{html}"
    );
    let t = outboxkit_core::NewEventType::new(
        outboxkit_core::Topic::new("order.created").unwrap(),
        "<script>alert(1)</script> placed",
    )
    .schema(serde_json::json!({"type": "object", "description": "<b>bold</b>"}));
    app.store.put_event_type(&t).await.unwrap();
    app.store
        .set_catalogue_mode(outboxkit_core::CatalogueMode::Validate)
        .await
        .unwrap();
    let (s, _, html) = raw(&app, get("/console/event-types?tenant=acme", &cookie)).await;
    assert_eq!(s, StatusCode::OK, "{html}");
    assert!(
        html.contains("order.created") && html.contains(">validate<"),
        "{html}"
    );
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt; placed"),
        "{html}"
    );
    assert!(
        html.contains("&lt;b&gt;bold&lt;/b&gt;") && !html.contains("<b>bold"),
        "{html}"
    );
    assert!(!html.contains("<script>"), "{html}");
    assert!(
        html.contains("href=\"/console/event-types?tenant=acme\""),
        "{html}"
    );
    app.finish().await;
}

/// Under `--base-path /outbox`: the console and the API answer there and nowhere else;
/// links, form actions, redirects and the cookie's `Path` carry the prefix.
#[tokio::test]
async fn a_console_under_a_base_path_keeps_every_url_under_it() {
    let app = App::sqlite_with(ServeConfig {
        base_path: outboxkit_serve::BasePath::new("/outbox").unwrap(),
        ..config()
    })
    .await;
    let (s, h, _) = raw(
        &app,
        Request::get("/outbox/console").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h[header::LOCATION], "/outbox/console/login");
    let (s, _, _) = raw(
        &app,
        Request::get("/console/login").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "nothing outside the prefix");
    let (s, h, _) = raw(
        &app,
        form(
            "/outbox/console/login",
            None,
            format!("token={}", app.writer),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    assert_eq!(h[header::LOCATION], "/outbox/console");
    let set = h[header::SET_COOKIE].to_str().unwrap();
    assert!(set.contains("Path=/outbox/console;"), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    for path in [
        "/outbox/console",
        "/outbox/console/deliveries",
        "/outbox/console/endpoints",
        "/outbox/console/bulk",
        "/outbox/console/audit",
    ] {
        let (s, _, html) = raw(&app, get(path, &cookie)).await;
        assert_eq!(s, StatusCode::OK, "{path}: {html}");
        for attr in ["href=\"", "action=\"", "src=\""] {
            for rest in html.split(attr).skip(1) {
                assert!(
                    rest.starts_with("/outbox/") || rest.starts_with('#'),
                    "{path}: {attr}{}",
                    &rest[..rest.len().min(40)]
                );
            }
        }
    }
    let (s, _) = app.get("/v1/tenants/acme/deliveries", &app.writer).await;
    assert_eq!(s, StatusCode::OK, "the API under /outbox/v1");
}

/// The raw payload is a download the browser never renders, and a read-only session cannot
/// bulk-replay.
#[tokio::test]
async fn raw_payload_is_a_plain_text_download_and_bulk_replay_needs_write_access() {
    let app = App::sqlite().await;
    app.endpoint("http://127.0.0.1:9/hook").await;
    app.enqueue("order.created", 1).await;
    let f = outboxkit_core::DeliveryFilter::default();
    let page = app
        .store
        .list_deliveries(&app.tenant, &f, outboxkit_core::PageRequest::first(1))
        .await
        .unwrap();
    let d = page.items[0].id;
    let cookie = login(&app, &app.writer).await;
    let (s, h, body) = raw(
        &app,
        get(
            &format!("/console/deliveries/{d}/payload?tenant=acme"),
            &cookie,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h[header::CONTENT_TYPE], "text/plain; charset=utf-8");
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert!(h[header::CONTENT_DISPOSITION]
        .to_str()
        .unwrap()
        .starts_with("attachment"));
    assert_eq!(body, "{\"n\":0}");
    let reader = login(&app, &app.reader).await;
    let (s, _, html) = raw(&app, get("/console/bulk?tenant=acme", &reader)).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{html}");
    let (_, _, overview) = raw(&app, get("/console", &reader)).await;
    let csrf = csrf_of(&overview);
    let (s, _, html) = raw(
        &app,
        form(
            "/console/bulk",
            Some(&reader),
            format!("csrf={csrf}&tenant=acme&filter=status%3Ddead&ids={d}"),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(html.contains("read-only"), "{html}");
}
