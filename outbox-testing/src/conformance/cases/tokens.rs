//! Admin API tokens ([`outboxkit_core::tokens::TokenStore`]).

use std::time::Duration;

use outboxkit_core::tokens::{ApiToken, PresentedToken, TokenAccess, TokenScope};
use outboxkit_core::{Clock, ErrorKind, OsEntropy, TenantId, TokenId};

use super::Fixture;

fn issue(fx: &Fixture, scope: TokenScope, access: TokenAccess, label: &str) -> (ApiToken, String) {
    ApiToken::issue(scope, access, label, fx.clock().now(), &OsEntropy).expect("issue")
}

/// Tokens read back equal what was written, each access kind (full, read-only, enqueue-only)
/// included, and list oldest first, revoked ones included.
pub async fn tokens_round_trip(fx: Fixture) {
    let t = fx.tokens();
    assert!(t.list_tokens().await.expect("list").is_empty());
    let acme = TenantId::new("acme").unwrap();
    let (admin, admin_text) = issue(&fx, TokenScope::Admin, TokenAccess::Full, "");
    fx.clock().advance(Duration::from_millis(5));
    let (reader, _) = issue(
        &fx,
        TokenScope::Tenant(acme.clone()),
        TokenAccess::ReadOnly,
        "support desk ✓",
    );
    fx.clock().advance(Duration::from_millis(5));
    let long = "é".repeat(100);
    let (writer, _) = issue(
        &fx,
        TokenScope::Tenant(acme.clone()),
        TokenAccess::Full,
        &long,
    );
    fx.clock().advance(Duration::from_millis(5));
    let (enqueuer, enqueuer_text) = issue(
        &fx,
        TokenScope::Tenant(acme),
        TokenAccess::EnqueueOnly,
        "orders service",
    );
    // Written out of order: the listing still goes by creation.
    for tok in [&writer, &enqueuer, &admin, &reader] {
        t.create_token(tok).await.expect("create");
    }
    for tok in [&admin, &reader, &writer, &enqueuer] {
        assert_eq!(&t.get_token(tok.id).await.expect("get"), tok);
    }
    let listed = t.list_tokens().await.expect("list");
    assert_eq!(
        listed,
        vec![admin.clone(), reader, writer, enqueuer.clone()]
    );
    // The stored digests still verify the texts handed out.
    for (tok, text) in [(&admin, &admin_text), (&enqueuer, &enqueuer_text)] {
        let back = t.get_token(tok.id).await.expect("get");
        assert!(back.verify(&PresentedToken::parse(text).expect("parse")));
    }
    let revoked = t
        .revoke_token(enqueuer.id, fx.clock().now())
        .await
        .expect("revoke");
    assert_eq!(
        revoked.access,
        TokenAccess::EnqueueOnly,
        "kept when revoked"
    );
}

/// A duplicate id is a `Conflict`, a bad label `InvalidInput`; neither writes anything.
pub async fn token_create_refuses_duplicates_and_bad_labels(fx: Fixture) {
    let t = fx.tokens();
    let (tok, _) = issue(&fx, TokenScope::Admin, TokenAccess::Full, "first");
    t.create_token(&tok).await.expect("create");
    let mut again = tok.clone();
    again.label = "second".into();
    again.access = TokenAccess::EnqueueOnly;
    let e = t.create_token(&again).await.expect_err("duplicate id");
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert_eq!(t.get_token(tok.id).await.expect("get"), tok);

    let (mut bad, _) = issue(&fx, TokenScope::Admin, TokenAccess::Full, "ok");
    bad.label = "x".repeat(201);
    let e = t.create_token(&bad).await.expect_err("long label");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    bad.label = "a\u{7}b".into();
    let e = t.create_token(&bad).await.expect_err("control character");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(t.list_tokens().await.expect("list"), vec![tok]);
}

/// Reading or revoking an id that was never stored is `NotFound`.
pub async fn unknown_token_is_not_found(fx: Fixture) {
    let t = fx.tokens();
    let id = TokenId::generate(fx.clock().now(), &OsEntropy);
    let e = t.get_token(id).await.expect_err("get");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = t
        .revoke_token(id, fx.clock().now())
        .await
        .expect_err("revoke");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(t.list_tokens().await.expect("list").is_empty());
}

/// Revoking sets the time once; the token stays listed and no longer verifies; another
/// token is untouched.
pub async fn revoked_token_stays_revoked(fx: Fixture) {
    let t = fx.tokens();
    let acme = TenantId::new("acme").unwrap();
    let (tok, text) = issue(
        &fx,
        TokenScope::Tenant(acme.clone()),
        TokenAccess::Full,
        "ci",
    );
    let (other, other_text) = issue(&fx, TokenScope::Tenant(acme), TokenAccess::Full, "other");
    t.create_token(&tok).await.expect("create");
    t.create_token(&other).await.expect("create");
    fx.clock().advance(Duration::from_secs(1));
    let first = fx.clock().now();
    let revoked = t.revoke_token(tok.id, first).await.expect("revoke");
    assert_eq!(revoked.revoked_at, Some(first));
    fx.clock().advance(Duration::from_secs(1));
    let again = t
        .revoke_token(tok.id, fx.clock().now())
        .await
        .expect("revoke again");
    assert_eq!(again.revoked_at, Some(first));
    let back = t.get_token(tok.id).await.expect("get");
    assert_eq!(back.revoked_at, Some(first));
    assert!(!back.verify(&PresentedToken::parse(&text).expect("parse")));
    let o = t.get_token(other.id).await.expect("get other");
    assert_eq!(o.revoked_at, None);
    assert!(o.verify(&PresentedToken::parse(&other_text).expect("parse")));
    assert_eq!(t.list_tokens().await.expect("list").len(), 2);
}
