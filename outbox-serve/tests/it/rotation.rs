//! Secret rotation through the API: a second rotation while one is in progress is refused
//! unless forced, and `finish-rotation` ends one.

use axum::http::StatusCode;
use outboxkit_core::{EndpointStore, TenantId};

use crate::common::App;

#[tokio::test]
async fn a_second_rotation_needs_force_and_finish_rotation_ends_one() {
    let app = App::sqlite().await;
    let acme = TenantId::new("acme").unwrap();
    let ep = app.endpoint("https://example.com/hooks").await;
    let base = format!("/v1/tenants/acme/endpoints/{ep}");
    let rotate = format!("{base}/rotate-secret");
    let (s, v) = app.post(&rotate, &app.writer, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(v["endpoint"]["rotation_in_progress"], true);
    let before = app.store.get_endpoint(&acme, ep).await.unwrap();
    // Again, with no body, a `null` body (as documented) or `{}`: 409, nothing changes.
    for body in [None, Some("null"), Some("{}"), Some(r#"{"force":false}"#)] {
        let (s, v) = app.post(&rotate, &app.writer, body).await;
        assert_eq!(s, StatusCode::CONFLICT, "{body:?}: {v}");
        assert_eq!(v["type"], "urn:outbox:problem:conflict");
        assert!(
            v["detail"].as_str().unwrap().contains("finish-rotation"),
            "{v}"
        );
        let now = app.store.get_endpoint(&acme, ep).await.unwrap();
        assert_eq!(now.secret, before.secret);
        assert_eq!(now.previous_secret, before.previous_secret);
    }
    // Forced: it rotates, and the secret that was current becomes the previous one.
    let (s, v) = app
        .post(&rotate, &app.writer, Some(r#"{"force":true}"#))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let forced = app.store.get_endpoint(&acme, ep).await.unwrap();
    assert_eq!(forced.previous_secret.as_ref(), Some(&before.secret));
    // Finishing: only the current secret signs; a read-only token may not.
    let finish = format!("{base}/finish-rotation");
    let (s, _) = app.post(&finish, &app.reader, None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = app.post(&finish, &app.writer, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["rotation_in_progress"], false);
    let done = app.store.get_endpoint(&acme, ep).await.unwrap();
    assert!(done.previous_secret.is_none());
    assert_eq!(done.secret, forced.secret);
    // Finishing twice is harmless; rotating afterwards needs no force.
    let (s, _) = app.post(&finish, &app.writer, None).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = app.post(&rotate, &app.writer, Some("null")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // Another tenant's token sees nothing there.
    let (s, _) = app.post(&finish, &app.other, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}
