//! The OpenAPI document is valid OpenAPI 3, lists exactly the router's routes, and every
//! answer it documents (status and content type) is one the server gives.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use outboxkit_core::endpoint::AnyUrl;
use outboxkit_core::tokens::{TokenScope, TokenStore};
use outboxkit_core::{DeliveryStatus, OsEntropy, PlaintextVault, Store, SystemClock};
use outboxkit_serve::{Serve, ServeConfig, API_ROUTES};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::{FaultyStore, WebhookReceiver};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{config, issue, loopback, App};

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
            .replace("{id}", "0193f7a0-0000-7000-8000-000000000000")
            .replace("{name}", "billing");
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

/// A request for `status` on `method path`: what makes the server answer it, or `None`
/// when the test knows no way (which fails the test: the document would claim too much).
struct Case<'a> {
    uri: String,
    token: Option<&'a str>,
    body: Option<(&'static str, String)>,
    ip: Option<[u8; 4]>,
    /// An `Idempotency-Key` header.
    key: Option<&'static str>,
}

/// The fixtures the cases act on.
struct Fixtures {
    endpoint: String,
    rotating: String,
    dead: String,
    dead_kept: String,
    pending: String,
    /// A pending delivery of its own, which the cancel route's success cancels, and its
    /// message.
    cancellable: String,
    cancellable_message: String,
    /// An admin token that may only read.
    admin_reader: &'static str,
}

/// A message to enqueue.
const MESSAGE: &str = r#"{"topic":"order.created","payload":{"n":1}}"#;

fn json_body(s: &str) -> Option<(&'static str, String)> {
    Some(("application/json", s.to_owned()))
}

#[allow(clippy::too_many_lines)]
async fn case<'a>(
    app: &'a App,
    fx: &Fixtures,
    method: &str,
    path: &str,
    status: u16,
    next_ip: &mut u8,
) -> Option<Case<'a>> {
    if path.starts_with("/v1/consumers") || path == "/v1/audit" {
        return consumer_case(app, fx, method, path, status, next_ip).await;
    }
    if !path.contains("{tenant}") && path != "/v1/health" && path != "/v1/openapi.json" {
        return catalogue_case(app, method, path, status, next_ip).await;
    }
    let has_id = path.contains("{id}");
    let on_deliveries = path.contains("/deliveries/{id}");
    // A valid target and body for this route.
    let target = if on_deliveries {
        if path.ends_with("/replay") {
            fx.dead.clone()
        } else if path.ends_with("/cancel") {
            fx.cancellable.clone()
        } else {
            fx.pending.clone()
        }
    } else if path.contains("/messages/{id}") {
        fx.cancellable_message.clone()
    } else if method == "delete" || path.ends_with("/rotate-secret") {
        app.endpoint("https://example.com/fresh").await.to_string()
    } else {
        fx.endpoint.clone()
    };
    let body = match (method, path) {
        ("post", p) if p.ends_with("/endpoints") => {
            json_body(r#"{"url":"https://example.com/new"}"#)
        }
        ("patch", _) => json_body(r#"{"description":"changed"}"#),
        ("post", p) if p.ends_with("/bulk") => json_body(r#"{"action":"replay","dry_run":true}"#),
        ("post", p) if p.ends_with("/rotate-secret") => json_body("null"),
        ("post", p) if p.ends_with("/messages") => json_body(MESSAGE),
        _ => None,
    };
    let enqueue = path.ends_with("/messages");
    let uri = |id: &str| path.replace("{tenant}", "acme").replace("{id}", id);
    let write = !matches!(method, "get" | "head");
    let token = if write { &app.writer } else { &app.reader };
    let ok = Case {
        uri: uri(&target),
        token: Some(token),
        body: body.clone(),
        ip: None,
        key: None,
    };
    Some(match status {
        // A repeat of an earlier enqueue's key.
        200 if enqueue => {
            let first = Case {
                key: Some("openapi-repeat"),
                ..ok
            };
            let (s, _, _) = send_as(&app.router, &first, method).await;
            assert_eq!(s, StatusCode::CREATED);
            first
        }
        200..=299 => ok,
        400 if has_id => Case {
            uri: uri("not-an-id"),
            ..ok
        },
        400 => match (method, path) {
            ("post", p) if p.ends_with("/endpoints") => Case {
                body: json_body("{}"),
                ..ok
            },
            ("post", p) if p.ends_with("/bulk") => Case {
                body: json_body(r#"{"action":"nope"}"#),
                ..ok
            },
            ("get", p) if p.ends_with("/deliveries") || p.ends_with("/audit") => Case {
                uri: format!("{}?limit=0", uri("")),
                ..ok
            },
            ("post", _) if enqueue => Case {
                body: json_body(r#"{"topic":"Bad Topic","payload":{}}"#),
                ..ok
            },
            _ => return None,
        },
        401 => Case { token: None, ..ok },
        403 if write => Case {
            token: Some(&app.reader),
            ..ok
        },
        404 => Case {
            token: Some(&app.other),
            ..ok
        },
        409 => match path {
            p if p.ends_with("/replay") => Case {
                uri: uri(&fx.pending),
                ..ok
            },
            p if p.ends_with("/retry") || p.ends_with("/deliveries/{id}/cancel") => Case {
                uri: uri(&fx.dead_kept),
                ..ok
            },
            p if p.ends_with("/rotate-secret") => Case {
                uri: uri(&fx.rotating),
                ..ok
            },
            _ => return None,
        },
        // Over the enqueue body limit (320 KiB), not only the other calls' (64 KiB).
        413 if enqueue => Case {
            body: Some((
                "application/json",
                format!("\"{}\"", "x".repeat(400 * 1024)),
            )),
            ..ok
        },
        413 if body.is_some() => Case {
            body: Some(("application/json", format!("\"{}\"", "x".repeat(70 * 1024)))),
            ..ok
        },
        415 if body.is_some() => Case {
            body: Some(("text/plain", "hello".into())),
            ..ok
        },
        429 => guessed_past_the_limit(app, ok, method, 9, next_ip).await,
        _ => return None,
    })
}

/// A 429 case: a wrong token from an address of its own (`10.9.<net>.<n>`), whose first guess
/// is answered 401 here, so the case's request (the second) meets the limit of 1.
async fn guessed_past_the_limit<'a>(
    app: &'a App,
    ok: Case<'a>,
    method: &str,
    net: u8,
    next_ip: &mut u8,
) -> Case<'a> {
    *next_ip += 1;
    let guess = Case {
        token: Some("obx_nope"),
        ip: Some([10, 9, net, *next_ip]),
        ..ok
    };
    let (s, _, _) = send_as(&app.router, &guess, method).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    guess
}

/// [`case`] for the admin-only global routes (`/v1/consumers`, `/v1/audit`): an admin
/// token, the consumer `billing`.
async fn consumer_case<'a>(
    app: &'a App,
    fx: &Fixtures,
    method: &str,
    path: &str,
    status: u16,
    next_ip: &mut u8,
) -> Option<Case<'a>> {
    let uri = |n: &str| path.replace("{name}", n);
    let write = method != "get";
    let ok = Case {
        uri: uri("billing"),
        token: Some(&app.admin),
        body: None,
        ip: None,
        key: None,
    };
    Some(match status {
        200..=299 => ok,
        400 if path.contains("{name}") => Case {
            uri: uri("Bad!Name"),
            ..ok
        },
        400 if path == "/v1/audit" => Case {
            uri: "/v1/audit?limit=0".to_owned(),
            ..ok
        },
        401 => Case { token: None, ..ok },
        403 if write => Case {
            token: Some(fx.admin_reader),
            ..ok
        },
        // A tenant's token: as for another tenant's path.
        404 => Case {
            token: Some(&app.writer),
            ..ok
        },
        429 => guessed_past_the_limit(app, ok, method, 9, next_ip).await,
        _ => return None,
    })
}

/// The cases of the global routes (the event-type catalogue): reads with any token that
/// may read, writes with an admin token.
async fn catalogue_case<'a>(
    app: &'a App,
    method: &str,
    path: &str,
    status: u16,
    next_ip: &mut u8,
) -> Option<Case<'a>> {
    let write = !matches!(method, "get" | "head");
    let topic = if method == "delete" {
        let fresh = format!("fresh.t{}", *next_ip);
        *next_ip += 1;
        let t = outboxkit_core::Topic::new(fresh.as_str()).unwrap();
        app.store
            .put_event_type(&outboxkit_core::NewEventType::new(t, ""))
            .await
            .unwrap();
        fresh
    } else {
        "order.created".to_owned()
    };
    let body = match (method, path) {
        ("put", p) if p.ends_with("/mode") => json_body(r#"{"mode":"off"}"#),
        ("put", _) => json_body(r#"{"description":"an order"}"#),
        _ => None,
    };
    let uri = |t: &str| path.replace("{topic}", t);
    let ok = Case {
        uri: uri(&topic),
        token: Some(if write { &app.admin } else { &app.reader }),
        body: body.clone(),
        ip: None,
        key: None,
    };
    Some(match status {
        200..=299 => ok,
        400 if path.contains("{topic}") => Case {
            uri: uri("Bad%20Topic"),
            ..ok
        },
        400 if path.ends_with("/mode") => Case {
            body: json_body(r#"{"mode":"strict"}"#),
            ..ok
        },
        401 => Case { token: None, ..ok },
        403 if write => Case {
            token: Some(&app.writer),
            ..ok
        },
        403 => Case {
            token: Some(&app.enqueuer),
            ..ok
        },
        404 if path.contains("{topic}") => Case {
            uri: uri("no.such.topic"),
            ..ok
        },
        413 if body.is_some() => Case {
            body: Some(("application/json", format!("\"{}\"", "x".repeat(70 * 1024)))),
            ..ok
        },
        415 if body.is_some() => Case {
            body: Some(("text/plain", "hello".into())),
            ..ok
        },
        429 => guessed_past_the_limit(app, ok, method, 8, next_ip).await,
        _ => return None,
    })
}

/// A server over a store that is always unavailable (tokens still work).
async fn unavailable(dir: &std::path::Path) -> (axum::Router, String) {
    let sq = SqliteStore::open(
        SqliteConfig::new(dir.join("down.db")),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .unwrap();
    let tokens: Arc<dyn TokenStore> = Arc::new(sq.clone());
    let (_, admin) = issue(&*tokens, TokenScope::Admin, false).await;
    let store: Arc<dyn Store> = Arc::new(FaultyStore::new(sq, 1).error_ratio(1.0));
    let router = Serve::new(store, tokens, Arc::new(SystemClock), Arc::new(OsEntropy))
        .with_vault(Arc::new(PlaintextVault))
        .with_url_policy(Arc::new(AnyUrl))
        .with_transport(loopback())
        .with_console_store(Arc::new(crate::down_console::DownConsole))
        .with_config(config())
        .router();
    (router, admin)
}

/// 408 needs a real socket: headers, part of the body, then nothing.
async fn slow_body(app: &App, cfg: &ServeConfig, path: &str, method: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(outboxkit_serve::serve_with(
        listener,
        app.router.clone(),
        cfg.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let uri = path
        .replace("{tenant}", "acme")
        .replace("{id}", "0193f7a0-0000-7000-8000-000000000000")
        .replace("{topic}", "order.created")
        .replace("{name}", "billing");
    // The catalogue's writes need an admin token before the body is read.
    let token = if path.contains("{tenant}") {
        &app.writer
    } else {
        &app.admin
    };
    s.write_all(
        format!(
            "{} {uri} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\n\
             content-length: 50\r\nconnection: close\r\n\r\n{{",
            method.to_uppercase(),
            token
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("an answer to the slow body")
        .unwrap();
    let _ = tx.send(());
    server.await.unwrap().unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn every_documented_answer_is_served_as_documented() {
    let cfg = ServeConfig {
        failed_auth_limit: 1,
        body_timeout: Duration::from_millis(300),
        ..config()
    };
    let app = App::sqlite_with(cfg.clone()).await;
    // Two dead deliveries, a pending one, an endpoint, and one with a rotation in progress.
    let receiver = WebhookReceiver::start().await.unwrap();
    receiver.refuse(500);
    let endpoint = app.endpoint(&receiver.url()).await.to_string();
    app.enqueue("order.created", 2).await;
    app.dispatch_until(DeliveryStatus::Dead, 2).await;
    app.enqueue("order.created", 1).await;
    let extra = app
        .store
        .enqueue(
            outboxkit_core::NewMessage::new("order.created", serde_json::json!({ "n": 9 }))
                .tenant("acme"),
        )
        .await
        .unwrap();
    let extra_message = extra.message_id.to_string();
    let (_, dead) = app
        .get("/v1/tenants/acme/deliveries?status=dead", &app.writer)
        .await;
    let (_, pending) = app
        .get("/v1/tenants/acme/deliveries?status=pending", &app.writer)
        .await;
    let rotating = app
        .endpoint("https://example.com/rotating")
        .await
        .to_string();
    let (s, _) = app
        .post(
            &format!("/v1/tenants/acme/endpoints/{rotating}/rotate-secret"),
            &app.writer,
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    // The pending delivery of the extra message (`true`) or of the other one.
    let of = |extra: bool| {
        pending["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| (d["message_id"] == extra_message.as_str()) == extra)
            .and_then(|d| d["id"].as_str())
            .unwrap()
            .to_owned()
    };
    let fx = Fixtures {
        endpoint,
        rotating,
        dead: dead["deliveries"][0]["id"].as_str().unwrap().to_owned(),
        dead_kept: dead["deliveries"][1]["id"].as_str().unwrap().to_owned(),
        pending: of(false),
        cancellable: of(true),
        cancellable_message: extra_message,
        admin_reader: Box::leak(
            issue(&*app.tokens, TokenScope::Admin, true)
                .await
                .1
                .into_boxed_str(),
        ),
    };
    let ordered = outboxkit_core::NewEventType::new(
        outboxkit_core::Topic::new("order.created").unwrap(),
        "an order",
    );
    app.store.put_event_type(&ordered).await.unwrap();
    // A consumer for the `/v1/consumers` routes.
    app.store
        .put_consumer(&outboxkit_core::Consumer {
            name: outboxkit_core::ConsumerName::new("billing").unwrap(),
            filter: outboxkit_core::TopicFilter::all(),
            created_at: outboxkit_core::Clock::now(&outboxkit_core::SystemClock),
            status: outboxkit_core::ConsumerStatus::Active,
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (down, down_admin) = unavailable(dir.path()).await;

    let doc = serde_json::to_value(outboxkit_serve::openapi_document()).unwrap();
    let mut next_ip = 0u8;
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            // Success first, so a case that changes a fixture runs after the others.
            let mut codes: Vec<(&String, &Value)> =
                op["responses"].as_object().unwrap().iter().collect();
            codes.sort_by_key(|(c, _)| (!c.starts_with('2'), c.to_string()));
            for (code, response) in codes {
                let status: u16 = code.parse().unwrap();
                let documented: Vec<&String> = response
                    .get("content")
                    .and_then(Value::as_object)
                    .map(|c| c.keys().collect())
                    .unwrap_or_default();
                let (s, h, body) = match status {
                    408 => {
                        let raw = slow_body(&app, &cfg, path, method).await;
                        let s = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
                        let ct = raw
                            .lines()
                            .find_map(|l| l.strip_prefix("content-type: "))
                            .unwrap_or("")
                            .to_owned();
                        let mut h = axum::http::HeaderMap::new();
                        h.insert("content-type", ct.parse().unwrap());
                        (StatusCode::from_u16(s).unwrap(), h, b"{}".to_vec())
                    }
                    503 => {
                        let token = op.get("security").map(|_| down_admin.as_str());
                        let c = Case {
                            uri: path
                                .replace("{tenant}", "acme")
                                .replace("{id}", &fx.endpoint)
                                .replace("{name}", "billing"),
                            token,
                            body: if op.get("requestBody").is_some() {
                                json_body(
                                    r#"{"url":"https://example.com/down","description":"changed","action":"replay"}"#,
                                )
                            } else {
                                None
                            },
                            ip: None,
                            key: None,
                        };
                        let mut c = c;
                        if path.ends_with("/bulk") {
                            c.body = json_body(r#"{"action":"replay"}"#);
                        } else if path.ends_with("/endpoints") && method == "post" {
                            c.body = json_body(r#"{"url":"https://example.com/down"}"#);
                        } else if method == "patch" {
                            c.body = json_body(r#"{"description":"changed"}"#);
                        } else if path.ends_with("/messages") {
                            c.body = json_body(MESSAGE);
                        } else if path.ends_with("/rotate-secret") {
                            c.body = None;
                        } else if path == "/v1/catalogue/mode" && method == "put" {
                            c.body = json_body(r#"{"mode":"off"}"#);
                        } else if path.starts_with("/v1/event-types/") && method == "put" {
                            c.body = json_body(r#"{"description":"down"}"#);
                        }
                        c.uri = c.uri.replace("{topic}", "order.created");
                        let (s, h, b) = send_as(&down, &c, method).await;
                        (s, h, b)
                    }
                    _ => {
                        let c = case(&app, &fx, method, path, status, &mut next_ip)
                            .await
                            .unwrap_or_else(|| {
                                panic!("{method} {path}: no way to produce the documented {status}")
                            });
                        send_as(&app.router, &c, method).await
                    }
                };
                assert_eq!(
                    s.as_u16(),
                    status,
                    "{method} {path}: {}",
                    String::from_utf8_lossy(&body)
                );
                let served = h
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_owned());
                match documented.as_slice() {
                    [] => assert!(
                        body.is_empty(),
                        "{method} {path} {status}: an undocumented body"
                    ),
                    [one] => assert_eq!(
                        served.as_deref(),
                        Some(one.as_str()),
                        "{method} {path} {status}"
                    ),
                    many => panic!("{method} {path} {status}: several content types {many:?}"),
                }
                checked += 1;
            }
        }
    }
    eprintln!("{checked} documented answers checked");
    assert!(checked > 100, "{checked} answers checked");
}

/// [`send`] with the route's method.
async fn send_as(
    router: &axum::Router,
    c: &Case<'_>,
    method: &str,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let mut r = Request::builder().uri(&c.uri).method(m);
    if let Some(t) = c.token {
        r = r.header("authorization", format!("Bearer {t}"));
    }
    if let Some(k) = c.key {
        r = r.header("idempotency-key", k);
    }
    let mut req = match &c.body {
        Some((ct, b)) => r
            .header("content-type", *ct)
            .header("content-length", b.len())
            .body(Body::from(b.clone())),
        None => r.body(Body::empty()),
    }
    .unwrap();
    if let Some(ip) = c.ip {
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
    }
    let res = tower::ServiceExt::oneshot(router.clone(), req)
        .await
        .unwrap();
    let (s, h) = (res.status(), res.headers().clone());
    (
        s,
        h,
        res.into_body().collect().await.unwrap().to_bytes().to_vec(),
    )
}

#[tokio::test]
async fn the_documented_parameter_rules_are_the_servers() {
    let app = App::sqlite().await;
    app.endpoint("https://example.com/hooks").await;
    app.enqueue("order.created", 1).await;
    let doc = serde_json::to_value(outboxkit_serve::openapi_document()).unwrap();
    let params = doc["paths"]["/v1/tenants/{tenant}/deliveries"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let schema = |name: &str| {
        params
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} is documented"))["schema"]
            .clone()
    };
    assert_eq!(schema("endpoint")["format"], "uuid");
    assert_eq!(schema("limit")["minimum"], 1);
    assert_eq!(schema("limit")["maximum"], 1000);
    let statuses: Vec<String> = schema("status")["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses.len(), DeliveryStatus::ALL.len());
    assert_eq!(schema("since")["oneOf"][0]["format"], "date-time");
    let id = &doc["paths"]["/v1/tenants/{tenant}/endpoints/{id}"]["get"]["parameters"];
    assert!(id
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "id" && p["schema"]["format"] == "uuid"));
    // The server takes what the document says, and refuses the rest with the field named.
    let app = &app;
    let list = |q: &str| {
        let uri = format!("/v1/tenants/acme/deliveries?{q}");
        async move { app.get(&uri, &app.writer).await }
    };
    for st in &statuses {
        assert_eq!(
            list(&format!("status={st}")).await.0,
            StatusCode::OK,
            "{st}"
        );
    }
    for (q, n) in [
        ("since=2000-01-01T00:00:00Z", 1),
        ("since=2000-01-01T01:00:00.5%2B01:00", 1),
        ("since=946684800000", 1),
        ("until=2000-01-01T00:00:00Z", 0),
        ("since=9999-01-01T00:00:00Z", 0),
        ("limit=1", 1),
        ("limit=1000", 1),
    ] {
        let (s, v) = list(q).await;
        assert_eq!(s, StatusCode::OK, "{q}: {v}");
        assert_eq!(v["deliveries"].as_array().unwrap().len(), n, "{q}");
    }
    for (q, field) in [
        ("since=yesterday", "since"),
        ("until=2026-02-30T00:00:00Z", "until"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("status=lost", "status"),
        ("endpoint=nope", "endpoint_id"),
    ] {
        let (s, v) = list(q).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert_eq!(v["field"], field, "{q}: {v}");
    }
}
