//! Console sessions in the store: they survive a restart of the server, logout ends them,
//! and revoking the token ends every session it opened.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use outboxkit_core::{ConsoleSession, OsEntropy, SystemClock, Timestamp};
use outboxkit_serve::Serve;

use crate::common::{config, issue, App};
use crate::console::{csrf_of, login};

/// A second server over the same store, as after a restart.
fn restarted(app: &App) -> Router {
    Serve::new(
        app.store.clone(),
        app.tokens.clone(),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .with_console_store(app.console.clone())
    .with_config(config())
    .router()
}

async fn call(router: &Router, req: Request<Body>) -> (StatusCode, String) {
    use http_body_util::BodyExt;
    let res = tower::ServiceExt::oneshot(router.clone(), req)
        .await
        .unwrap();
    let s = res.status();
    let b = res.into_body().collect().await.unwrap().to_bytes();
    (s, String::from_utf8_lossy(&b).into_owned())
}

fn page(cookie: &str) -> Request<Body> {
    Request::get("/console")
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap()
}

/// The stored id of a `name=value` cookie.
fn hash(cookie: &str) -> [u8; 32] {
    ConsoleSession::hash_of(cookie.split_once('=').unwrap().1)
}

fn now() -> Timestamp {
    outboxkit_core::Clock::now(&SystemClock)
}

#[tokio::test]
async fn a_session_survives_a_restart_and_logout_ends_it() {
    let app = App::sqlite().await;
    let cookie = login(&app, &app.writer).await;
    let stored = app
        .console
        .get_session(&hash(&cookie), now())
        .await
        .unwrap();
    assert!(
        stored.is_some(),
        "the store holds the session by its digest"
    );
    let again = restarted(&app);
    let (s, html) = call(&again, page(&cookie)).await;
    assert_eq!(s, StatusCode::OK, "the cookie still works after a restart");
    let csrf = csrf_of(&html);
    let logout = Request::post("/console/logout")
        .header(header::COOKIE, &cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={csrf}")))
        .unwrap();
    assert_eq!(call(&again, logout).await.0, StatusCode::SEE_OTHER);
    assert_eq!(
        app.console
            .get_session(&hash(&cookie), now())
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        call(&app.router, page(&cookie)).await.0,
        StatusCode::SEE_OTHER
    );
    assert_eq!(call(&again, page(&cookie)).await.0, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_revoked_token_ends_its_stored_sessions() {
    let app = App::sqlite().await;
    let acme = outboxkit_core::TokenScope::Tenant(app.tenant.clone());
    let (token, text) = issue(&*app.tokens, acme, false).await;
    let first = login(&app, &text).await;
    let second = login(&app, &text).await;
    let kept = login(&app, &app.writer).await;
    app.tokens.revoke_token(token.id, now()).await.unwrap();
    let again = restarted(&app);
    assert_eq!(call(&again, page(&first)).await.0, StatusCode::SEE_OTHER);
    for c in [&first, &second] {
        assert_eq!(
            app.console.get_session(&hash(c), now()).await.unwrap(),
            None
        );
    }
    assert_eq!(
        call(&app.router, page(&second)).await.0,
        StatusCode::SEE_OTHER
    );
    assert_eq!(call(&again, page(&kept)).await.0, StatusCode::OK);
}
