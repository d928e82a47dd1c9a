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
