//! The audit log and console sessions ([`outboxkit_core::ConsoleStore`]).

use std::time::Duration;

use outboxkit_core::console_store::MAX_SESSIONS_PER_TOKEN;
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::{
    AuditEntry, ConsoleSession, ErrorKind, OsEntropy, TenantId, Timestamp, TokenId,
};

use super::helpers::{assert_kind, now, tenant};
use super::Fixture;

fn entry(fx: &Fixture, t: Option<&str>, action: &str, target: &str) -> AuditEntry {
    AuditEntry::new(
        now(fx),
        &OsEntropy,
        t.map(tenant),
        "token:abc (ops ✓)",
        action,
        target,
    )
    .with_detail("3 deliveries")
    .with_source(Some("192.0.2.7".to_owned()))
}

async fn write(fx: &Fixture, e: &AuditEntry) {
    fx.console().record_audit(e).await.expect("record_audit");
}

async fn all(fx: &Fixture, t: Option<&TenantId>, limit: u32) -> Vec<AuditEntry> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = fx
            .console()
            .list_audit(t, limit, after)
            .await
            .expect("list_audit");
        assert!(page.items.len() <= limit as usize);
        out.extend(page.items);
        match page.next {
            Some(c) => after = Some(c),
            None => return out,
        }
    }
}

/// Entries read back equal what was written, newest first by `(at, id)` (two in the same
/// millisecond included), and paging with the cursor sees each exactly once.
pub async fn audit_lists_newest_first_with_stable_cursor(fx: Fixture) {
    let mut written = Vec::new();
    for i in 0..7 {
        let e = entry(&fx, Some("acme"), "endpoint.pause", &format!("ep-{i}"));
        write(&fx, &e).await;
        written.push(e);
        if i % 2 == 0 {
            fx.clock().advance(Duration::from_millis(10));
        }
    }
    let mut want = written.clone();
    want.sort_by_key(|e| std::cmp::Reverse((e.at, e.id)));
    let first = fx
        .console()
        .list_audit(Some(&tenant("acme")), 100, None)
        .await
        .expect("list");
    assert_eq!(first.items, want);
    assert_eq!(first.next, None);
    for limit in [1, 2, 3] {
        assert_eq!(
            all(&fx, Some(&tenant("acme")), limit).await,
            want,
            "limit {limit}"
        );
    }
    // A write after a page was read appears at the head, not inside later pages.
    let page = fx.console().list_audit(None, 3, None).await.expect("list");
    fx.clock().advance(Duration::from_millis(10));
    write(&fx, &entry(&fx, Some("acme"), "delivery.replay", "late")).await;
    let rest = fx
        .console()
        .list_audit(None, 100, page.next)
        .await
        .expect("rest");
    assert_eq!(rest.items, want[3..].to_vec());
}

/// A tenant sees only its own entries; the admin's view (`None`) sees every entry,
/// admin-scope ones included.
pub async fn audit_is_scoped_by_tenant(fx: Fixture) {
    let a = entry(&fx, Some("acme"), "endpoint.pause", "e1");
    fx.clock().advance(Duration::from_millis(1));
    let b = entry(&fx, Some("other"), "endpoint.pause", "e2");
    fx.clock().advance(Duration::from_millis(1));
    let admin = entry(&fx, None, "token.revoke", "t1");
    for e in [&a, &b, &admin] {
        write(&fx, e).await;
    }
    assert_eq!(all(&fx, Some(&tenant("acme")), 10).await, vec![a.clone()]);
    assert_eq!(all(&fx, Some(&tenant("other")), 10).await, vec![b.clone()]);
    assert!(all(&fx, Some(&tenant("nobody")), 10).await.is_empty());
    assert_eq!(all(&fx, None, 10).await, vec![admin, b, a]);
}

/// An invalid entry, a second entry with an existing id and a bad limit are refused, and
/// nothing is written.
pub async fn audit_refuses_bad_entries(fx: Fixture) {
    let good = entry(&fx, Some("acme"), "endpoint.pause", "e1");
    write(&fx, &good).await;
    let mut again = entry(&fx, Some("acme"), "endpoint.resume", "e1");
    again.id = good.id;
    assert_kind(
        fx.console().record_audit(&again).await,
        ErrorKind::Conflict,
        "same id",
    );
    let mut bad = entry(&fx, Some("acme"), "endpoint.pause", "e1");
    bad.actor = String::new();
    assert_kind(
        fx.console().record_audit(&bad).await,
        ErrorKind::InvalidInput,
        "empty actor",
    );
    let mut bad = entry(&fx, Some("acme"), "endpoint.pause", "e1");
    bad.detail = "x".repeat(501);
    assert_kind(
        fx.console().record_audit(&bad).await,
        ErrorKind::InvalidInput,
        "long detail",
    );
    let mut bad = entry(&fx, Some("acme"), "endpoint.pause", "e1");
    bad.target = "a\nb".to_owned();
    assert_kind(
        fx.console().record_audit(&bad).await,
        ErrorKind::InvalidInput,
        "control character",
    );
    for limit in [0, 1001] {
        assert_kind(
            fx.console().list_audit(None, limit, None).await,
            ErrorKind::InvalidInput,
            "limit",
        );
    }
    assert_eq!(all(&fx, None, 10).await, vec![good]);
}

/// `purge_audit` removes only entries before the cutoff, oldest first, at most `limit`.
pub async fn audit_purge_removes_only_older_entries(fx: Fixture) {
    let mut written = Vec::new();
    for i in 0..5 {
        let e = entry(
            &fx,
            if i % 2 == 0 { Some("acme") } else { None },
            "a.b",
            "t",
        );
        write(&fx, &e).await;
        written.push(e);
        fx.clock().advance(Duration::from_secs(60));
    }
    let cutoff = written[3].at;
    assert_kind(
        fx.console().purge_audit(cutoff, 0).await,
        ErrorKind::InvalidInput,
        "limit 0",
    );
    assert_eq!(fx.console().purge_audit(cutoff, 2).await.expect("purge"), 2);
    let mut left = all(&fx, None, 10).await;
    left.reverse();
    assert_eq!(left, written[2..].to_vec());
    assert_eq!(
        fx.console().purge_audit(cutoff, 100).await.expect("purge"),
        1
    );
    assert_eq!(
        fx.console().purge_audit(cutoff, 100).await.expect("purge"),
        0
    );
    let mut left = all(&fx, None, 10).await;
    left.reverse();
    assert_eq!(left, written[3..].to_vec());
}

fn session(fx: &Fixture, cookie: &str, token: TokenId, ttl: Duration) -> ConsoleSession {
    let created_at = now(fx);
    ConsoleSession {
        id_hash: ConsoleSession::hash_of(cookie),
        token,
        scope: TokenScope::Tenant(tenant("acme")),
        read_only: true,
        csrf: format!("csrf-{cookie}"),
        created_at,
        expires_at: created_at.saturating_add(ttl),
    }
}

fn token(fx: &Fixture) -> TokenId {
    TokenId::generate(now(fx), &OsEntropy)
}

const HOUR: Duration = Duration::from_secs(3600);

/// A session reads back as written (by its hash only); another cookie finds nothing;
/// `delete_session` ends it, once.
pub async fn sessions_round_trip_and_delete(fx: Fixture) {
    let c = fx.console();
    let s = session(&fx, "cookie-1", token(&fx), HOUR);
    let mut admin = session(&fx, "cookie-2", token(&fx), HOUR);
    admin.scope = TokenScope::Admin;
    admin.read_only = false;
    c.put_session(&s, now(&fx)).await.expect("put");
    c.put_session(&admin, now(&fx)).await.expect("put");
    let got = c.get_session(&s.id_hash, now(&fx)).await.expect("get");
    assert_eq!(got, Some(s.clone()));
    let got = c.get_session(&admin.id_hash, now(&fx)).await.expect("get");
    assert_eq!(got, Some(admin.clone()));
    let other = ConsoleSession::hash_of("cookie-3");
    assert_eq!(c.get_session(&other, now(&fx)).await.expect("get"), None);
    let mut bad = session(&fx, "cookie-4", token(&fx), HOUR);
    bad.csrf = String::new();
    assert_kind(
        c.put_session(&bad, now(&fx)).await,
        ErrorKind::InvalidInput,
        "empty csrf",
    );
    assert_eq!(
        c.get_session(&bad.id_hash, now(&fx)).await.expect("get"),
        None
    );
    assert!(c.delete_session(&s.id_hash).await.expect("delete"));
    assert!(!c.delete_session(&s.id_hash).await.expect("delete"));
    assert_eq!(
        c.get_session(&s.id_hash, now(&fx)).await.expect("get"),
        None
    );
    assert!(c
        .get_session(&admin.id_hash, now(&fx))
        .await
        .expect("get")
        .is_some());
}

/// A session is not returned at or past its expiry, and a later `put_session` removes it
/// (deleting it then finds nothing).
pub async fn sessions_expire(fx: Fixture) {
    let c = fx.console();
    let short = session(&fx, "short", token(&fx), Duration::from_secs(60));
    let long = session(&fx, "long", token(&fx), HOUR);
    c.put_session(&short, now(&fx)).await.expect("put");
    c.put_session(&long, now(&fx)).await.expect("put");
    fx.clock().advance(Duration::from_secs(59));
    assert!(c
        .get_session(&short.id_hash, now(&fx))
        .await
        .expect("get")
        .is_some());
    fx.clock().advance(Duration::from_secs(1));
    assert_eq!(
        c.get_session(&short.id_hash, now(&fx)).await.expect("get"),
        None
    );
    let next = session(&fx, "next", token(&fx), HOUR);
    c.put_session(&next, now(&fx)).await.expect("put");
    assert!(!c.delete_session(&short.id_hash).await.expect("delete"));
    assert!(c
        .get_session(&long.id_hash, now(&fx))
        .await
        .expect("get")
        .is_some());
}

/// One token keeps at most `MAX_SESSIONS_PER_TOKEN` sessions: each login past it ends the
/// oldest; another token's sessions stay.
pub async fn sessions_are_bounded_per_token(fx: Fixture) {
    let c = fx.console();
    let busy = token(&fx);
    let calm = token(&fx);
    let kept = session(&fx, "calm", calm, HOUR);
    c.put_session(&kept, now(&fx)).await.expect("put");
    let mut mine = Vec::new();
    for i in 0..MAX_SESSIONS_PER_TOKEN + 2 {
        fx.clock().advance(Duration::from_millis(5));
        let s = session(&fx, &format!("busy-{i}"), busy, HOUR);
        c.put_session(&s, now(&fx)).await.expect("put");
        mine.push(s);
    }
    let t = now(&fx);
    for (i, s) in mine.iter().enumerate() {
        let live = c.get_session(&s.id_hash, t).await.expect("get").is_some();
        assert_eq!(live, i >= 2, "session {i}");
    }
    assert!(c
        .get_session(&kept.id_hash, t)
        .await
        .expect("get")
        .is_some());
}

/// `delete_token_sessions` ends every session of one token and no other.
pub async fn token_sessions_end_together(fx: Fixture) {
    let c = fx.console();
    let revoked = token(&fx);
    let other = token(&fx);
    let a = session(&fx, "a", revoked, HOUR);
    let b = session(&fx, "b", revoked, HOUR);
    let k = session(&fx, "k", other, HOUR);
    for s in [&a, &b, &k] {
        c.put_session(s, now(&fx)).await.expect("put");
    }
    assert_eq!(c.delete_token_sessions(revoked).await.expect("delete"), 2);
    assert_eq!(c.delete_token_sessions(revoked).await.expect("delete"), 0);
    let t: Timestamp = now(&fx);
    assert_eq!(c.get_session(&a.id_hash, t).await.expect("get"), None);
    assert_eq!(c.get_session(&b.id_hash, t).await.expect("get"), None);
    assert!(c.get_session(&k.id_hash, t).await.expect("get").is_some());
}
