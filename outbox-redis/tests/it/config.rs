//! Configuration is checked before anything is written.

use std::sync::Arc;

use outboxkit_core::{ErrorKind, OsEntropy, SystemClock};
use outboxkit_redis::{RedisConfig, RedisStore};

use crate::common::url;

/// A prefix without a hash tag would spread one outbox over cluster slots: refused.
#[tokio::test]
async fn prefix_without_hash_tag_is_refused() {
    for prefix in ["outbox", "{}", "{}outbox{x}", "{outbox"] {
        let client = redis::Client::open(url()).expect("a redis url");
        let e = RedisStore::new(
            client,
            RedisConfig::with_prefix(prefix),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .await
        .unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (ErrorKind::Misconfigured, Some("prefix")),
            "{prefix}"
        );
    }
}

/// A bad URL is `Misconfigured`, and the message does not repeat it (it may hold a password).
#[tokio::test]
async fn bad_url_is_misconfigured_without_echoing_it() {
    let e = RedisStore::connect("notredis://user:secret@host")
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (ErrorKind::Misconfigured, Some("url"))
    );
    assert!(!e.to_string().contains("secret"), "{e}");
}

/// A server that accepts connections but never answers (a firewall, the wrong service) makes
/// opening fail as `Unavailable` within `setup_timeout`, instead of waiting on it forever.
#[tokio::test]
async fn a_silent_server_fails_within_the_setup_timeout() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let config = RedisConfig {
        setup_timeout: std::time::Duration::from_millis(300),
        ..RedisConfig::with_prefix("{setup}")
    };
    // A watchdog, not a timing assertion: a hang fails the test instead of stalling it.
    let opened = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        RedisStore::connect_with(&url, config),
    )
    .await
    .expect("opening a store on a silent server hung");
    let e = opened.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!e.to_string().contains("127.0.0.1"), "{e}");
}

/// A zero setup timeout is a configuration error.
#[tokio::test]
async fn a_zero_setup_timeout_is_refused() {
    let config = RedisConfig {
        setup_timeout: std::time::Duration::ZERO,
        ..RedisConfig::default()
    };
    let e = RedisStore::connect_with(&url(), config).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misconfigured, "{e}");
}
