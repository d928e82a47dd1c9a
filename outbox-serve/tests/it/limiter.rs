//! The failed-authentication limiter: it slows guesses, never a valid token, and an
//! attacker cannot wipe it by spreading guesses over many addresses.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use outboxkit_serve::ServeConfig;

use crate::auth::raw;
use crate::common::{config, App};
use crate::console::from;

fn stats(token: &str) -> Request<Body> {
    Request::get("/v1/tenants/acme/stats")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn a_valid_token_is_accepted_from_an_address_over_the_limit() {
    let app = App::sqlite_with(ServeConfig {
        failed_auth_limit: 3,
        ..config()
    })
    .await;
    let proxy = [10, 0, 0, 1];
    for _ in 0..3 {
        let (s, _, _) = raw(&app, from(proxy, stats("obx_nope"))).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    // More guesses from there are refused…
    let (s, h, _) = raw(&app, from(proxy, stats("obx_nope"))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    assert!(h.contains_key(header::RETRY_AFTER));
    // …but an operator behind the same proxy with a valid token gets in, and so does the
    // console's login.
    let (s, _, body) = raw(&app, from(proxy, stats(&app.writer))).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let login = Request::post("/console/login")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={}", app.writer)))
        .unwrap();
    let (s, _, _) = raw(&app, from(proxy, login)).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    // A revoked token is still a failure.
    let (s, _, _) = raw(&app, from(proxy, stats(&app.revoked))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn guesses_from_many_addresses_do_not_wipe_the_limiter() {
    let app = App::sqlite_with(ServeConfig {
        failed_auth_limit: 3,
        ..config()
    })
    .await;
    let first = [10, 0, 0, 1];
    for _ in 0..3 {
        raw(&app, from(first, stats("obx_nope"))).await;
    }
    let (s, _, _) = raw(&app, from(first, stats("obx_nope"))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    // One guess from each of 10,050 other addresses.
    for i in 0..10_050u32 {
        let b = i.to_be_bytes();
        raw(&app, from([11, b[1], b[2], b[3]], stats("obx_nope"))).await;
    }
    // The first address is still refused, and a valid token still gets in.
    let (s, _, _) = raw(&app, from(first, stats("obx_nope"))).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS);
    let (s, _, _) = raw(&app, from(first, stats(&app.writer))).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _, _) = raw(&app, from([12, 0, 0, 1], stats(&app.writer))).await;
    assert_eq!(s, StatusCode::OK);
}
