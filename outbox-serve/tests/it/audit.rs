//! The audit log: who changed what, when and from where, through the API and the console,
//! read back by tenant (`/v1/tenants/{tenant}/audit`) and whole (`/v1/audit`, admin only).

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use serde_json::Value;

use crate::auth::{raw, seed};
use crate::common::App;
use crate::console::{act, csrf_of, form, from, get, login};

/// A POST with a bearer token from `ip`.
fn post_from(ip: [u8; 4], path: &str, token: &str) -> Request<Body> {
    from(
        ip,
        Request::post(path)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap(),
    )
}

/// Every entry the token sees at `path`, following the cursor with pages of `limit`.
async fn entries(app: &App, path: &str, token: &str, limit: u32) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let uri = match &cursor {
            Some(c) => format!("{path}?limit={limit}&cursor={c}"),
            None => format!("{path}?limit={limit}"),
        };
        let (s, v) = app.get(&uri, token).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let page = v["entries"].as_array().unwrap();
        assert!(page.len() <= limit as usize);
        out.extend(page.iter().cloned());
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
}

fn actions(list: &[Value]) -> Vec<&str> {
    list.iter().map(|e| e["action"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn api_changes_are_recorded_with_who_what_and_where() {
    let app = App::sqlite().await;
    let (ep, d) = seed(&app).await;
    let t = "/v1/tenants/acme";
    let (s, _, b) = raw(
        &app,
        post_from(
            [203, 0, 113, 9],
            &format!("{t}/endpoints/{ep}/pause"),
            &app.writer,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, _, b) = raw(
        &app,
        post_from(
            [203, 0, 113, 9],
            &format!("{t}/deliveries/{d}/replay"),
            &app.writer,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let all = entries(&app, &format!("{t}/audit"), &app.reader, 100).await;
    // Newest first: the replay, the pause, the endpoint's creation (by seed).
    assert_eq!(
        actions(&all),
        ["delivery.replay", "endpoint.pause", "endpoint.create"]
    );
    let replay = &all[0];
    assert_eq!(replay["target"], d.as_str());
    assert_eq!(replay["tenant"], "acme");
    assert_eq!(replay["source"], "203.0.113.9");
    let actor = replay["actor"].as_str().unwrap();
    assert!(
        actor.starts_with("token:") && actor.ends_with("(test)"),
        "{actor}"
    );
    assert!(
        replay["detail"].as_str().unwrap().contains("/replay"),
        "{replay}"
    );
    assert_eq!(all[1]["target"], ep.as_str());
    // Another tenant sees none of it; the admin sees it all; a tenant token has no /v1/audit.
    assert!(entries(&app, "/v1/tenants/other/audit", &app.other, 10)
        .await
        .is_empty());
    let (s, _) = app.get("/v1/tenants/acme/audit", &app.other).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(entries(&app, "/v1/audit", &app.admin, 2).await, all);
    let (s, _) = app.get("/v1/audit", &app.writer).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn refused_calls_reads_and_enqueues_are_not_recorded() {
    let app = App::sqlite().await;
    let (ep, d) = seed(&app).await;
    let t = "/v1/tenants/acme";
    let before = entries(&app, &format!("{t}/audit"), &app.reader, 100).await;
    let (s, _) = app
        .post(&format!("{t}/endpoints/{ep}/pause"), &app.reader, None)
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = app
        .post(&format!("{t}/endpoints/{ep}/pause"), &app.revoked, None)
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = app
        .post(&format!("{t}/deliveries/{d}/retry"), &app.writer, None)
        .await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a dead delivery is replayed, not retried"
    );
    let (s, _) = app.get(&format!("{t}/endpoints/{ep}"), &app.writer).await;
    assert_eq!(s, StatusCode::OK);
    app.enqueue("order.created", 1).await;
    assert_eq!(
        entries(&app, &format!("{t}/audit"), &app.reader, 100).await,
        before
    );
    for bad in ["limit=0", "limit=1001", "cursor=nope"] {
        let (s, v) = app.get(&format!("{t}/audit?{bad}"), &app.reader).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
    }
}

#[tokio::test]
async fn console_logins_actions_and_logouts_are_recorded() {
    let app = App::sqlite().await;
    let (ep, _) = seed(&app).await;
    let cookie = login(&app, &app.writer).await;
    let (s, _, html) = act(&app, &cookie, "acme", "pause", &ep, "").await;
    assert_eq!(s, StatusCode::SEE_OTHER, "{html}");
    let (_, _, page) = raw(&app, get("/console", &cookie)).await;
    let csrf = csrf_of(&page);
    let (s, _, _) = raw(
        &app,
        form("/console/logout", Some(&cookie), format!("csrf={csrf}")),
    )
    .await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let all = entries(&app, "/v1/tenants/acme/audit", &app.reader, 100).await;
    assert_eq!(
        actions(&all),
        [
            "session.logout",
            "endpoint.pause",
            "session.login",
            "endpoint.create"
        ]
    );
    assert_eq!(all[1]["target"], ep.as_str());
    assert_eq!(all[1]["detail"], "from the console");
    assert_eq!(all[0]["actor"], all[2]["actor"]);
}
