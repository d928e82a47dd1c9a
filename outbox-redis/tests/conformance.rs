//! The whole conformance suite against Redis, each case under its own random key prefix.

use std::sync::Arc;

use outboxkit_core::{EntropyExt, OsEntropy, Store};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_testing::conformance::{backend_unavailable, Fixture};
use outboxkit_testing::ManualClock;

fn url() -> String {
    std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

async fn open(prefix: String, clock: Arc<ManualClock>) -> outboxkit_core::Result<RedisStore> {
    let client = redis::Client::open(url()).map_err(|e| {
        outboxkit_core::Error::misconfigured("url", "is not a redis url").with_source(e)
    })?;
    RedisStore::new(
        client,
        RedisConfig::with_prefix(prefix),
        clock,
        Arc::new(OsEntropy),
    )
    .await
}

/// Delete every key under `prefix`.
async fn cleanup(prefix: String) {
    let Ok(client) = redis::Client::open(url()) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let mut cursor: u64 = 0;
    loop {
        let Ok((next, keys)): redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
        else {
            return;
        };
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> =
                redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
    let prefix = format!("{{outbox-test-{:016x}}}", OsEntropy.next_u64());
    let store = match open(prefix.clone(), clock.clone()).await {
        Ok(s) => s,
        Err(e) => return backend_unavailable("redis", e),
    };
    let (p, c) = (prefix.clone(), clock.clone());
    Some(
        Fixture::new(Arc::new(store.clone()), clock)
            .with_tokens(Arc::new(store))
            .with_reopen(move || {
                let (p, c) = (p.clone(), c.clone());
                async move {
                    let s = open(p, c)
                        .await
                        .expect("a second redis store on the same prefix");
                    Arc::new(s) as Arc<dyn Store>
                }
            })
            .with_cleanup(cleanup(prefix)),
    )
}

outboxkit_testing::conformance_tests!(setup);
