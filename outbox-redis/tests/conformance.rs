//! The whole conformance suite against Redis, each case under its own random key prefix:
//! on the single server (one shard), and in `cluster::` on a local three-node Redis Cluster
//! with the outbox spread over three shards.

use std::sync::Arc;

use outboxkit_core::NewMessage;
use outboxkit_core::{EntropyExt, OsEntropy, Store};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_testing::conformance::txn::{TxnFixture, TxnHarness};
use outboxkit_testing::conformance::{backend_unavailable, Fixture};
use outboxkit_testing::ManualClock;

#[path = "support/cluster.rs"]
mod support;

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

/// Delete every key under `prefix` (and its shards' prefixes) on every cluster node.
async fn cleanup_cluster(prefix: String, urls: Vec<String>) {
    let stem = prefix.trim_end_matches('}').to_owned();
    for url in urls {
        let Ok(client) = redis::Client::open(url) else {
            continue;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            continue;
        };
        let mut cursor: u64 = 0;
        loop {
            let Ok((next, keys)): redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{stem}*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
            else {
                break;
            };
            for k in keys {
                let _: redis::RedisResult<i64> =
                    redis::cmd("DEL").arg(k).query_async(&mut conn).await;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
}

async fn open_cluster(
    prefix: String,
    clock: Arc<ManualClock>,
) -> outboxkit_core::Result<RedisStore> {
    let c = support::cluster("main");
    let urls = c.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut config = RedisConfig::with_prefix(prefix);
    config.shards = 3;
    RedisStore::new_cluster(&nodes, config, clock, Arc::new(OsEntropy)).await
}

async fn setup_cluster(clock: Arc<ManualClock>) -> Option<Fixture> {
    if !support::available() {
        return backend_unavailable(
            "redis cluster",
            outboxkit_core::Error::misconfigured("redis-server", "is not installed"),
        );
    }
    let prefix = format!("{{outbox-test-{:016x}}}", OsEntropy.next_u64());
    let store = match open_cluster(prefix.clone(), clock.clone()).await {
        Ok(s) => s,
        Err(e) => return backend_unavailable("redis cluster", e),
    };
    let (p, c) = (prefix.clone(), clock.clone());
    Some(
        Fixture::new(Arc::new(store.clone()), clock)
            .with_tokens(Arc::new(store.clone()))
            .with_console(Arc::new(store))
            .with_keys_split_over_shards()
            .with_reopen(move || {
                let (p, c) = (p.clone(), c.clone());
                async move {
                    let s = open_cluster(p, c)
                        .await
                        .expect("a second cluster store on the same prefix");
                    Arc::new(s) as Arc<dyn Store>
                }
            })
            .with_cleanup(cleanup_cluster(prefix, support::cluster("main").urls())),
    )
}

mod cluster {
    use super::setup_cluster;

    outboxkit_testing::conformance_tests!(setup_cluster);

    outboxkit_testing::token_conformance_tests!(setup_cluster);

    outboxkit_testing::console_conformance_tests!(setup_cluster);
}

fn new_prefix() -> String {
    format!("{{outbox-test-{:016x}}}", OsEntropy.next_u64())
}

async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
    fixture(new_prefix(), clock).await
}

async fn fixture(prefix: String, clock: Arc<ManualClock>) -> Option<Fixture> {
    let store = match open(prefix.clone(), clock.clone()).await {
        Ok(s) => s,
        Err(e) => return backend_unavailable("redis", e),
    };
    let (p, c) = (prefix.clone(), clock.clone());
    Some(
        Fixture::new(Arc::new(store.clone()), clock)
            .with_tokens(Arc::new(store.clone()))
            .with_console(Arc::new(store))
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

outboxkit_testing::token_conformance_tests!(setup);

outboxkit_testing::console_conformance_tests!(setup);

/// The transaction harness: the caller's write is a `SET` of a marker key (in the
/// outbox's hash slot, as a `MULTI` on a cluster needs), the transaction an atomic
/// pipeline that `EXEC`s on commit and is never sent on roll-back.
#[derive(Debug)]
struct Multi {
    store: RedisStore,
}

#[async_trait::async_trait]
impl TxnHarness for Multi {
    async fn write_and_enqueue(
        &self,
        marker: &str,
        messages: Vec<NewMessage>,
        commit: bool,
    ) -> outboxkit_core::Result<()> {
        // `enqueue_in` checks against the handle's copy of the event-type catalogue, which it
        // cannot read itself: an application refreshes it before building its `MULTI`.
        self.store.refresh_catalogue().await?;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .set(format!("{}:marker:{marker}", self.store.prefix()), 1)
            .ignore();
        for m in messages {
            self.store.enqueue_in(&mut pipe, m)?;
        }
        if commit {
            let _: redis::Value = pipe
                .query_async(&mut self.store.connection())
                .await
                .map_err(|e| {
                    outboxkit_core::Error::new(
                        outboxkit_core::ErrorKind::Unavailable,
                        "exec failed",
                    )
                    .with_source(e)
                })?;
        }
        Ok(())
    }

    async fn marker_exists(&self, marker: &str) -> outboxkit_core::Result<bool> {
        let n: i64 = redis::cmd("EXISTS")
            .arg(format!("{}:marker:{marker}", self.store.prefix()))
            .query_async(&mut self.store.connection())
            .await
            .map_err(|e| {
                outboxkit_core::Error::new(outboxkit_core::ErrorKind::Unavailable, "exists failed")
                    .with_source(e)
            })?;
        Ok(n == 1)
    }
}

async fn setup_txn(clock: Arc<ManualClock>) -> Option<TxnFixture> {
    let prefix = new_prefix();
    let fx = fixture(prefix.clone(), clock.clone()).await?;
    let store = open(prefix, clock)
        .await
        .expect("a second store on the same prefix");
    Some(TxnFixture {
        fx,
        harness: Arc::new(Multi { store }),
    })
}

outboxkit_testing::transaction_tests!(setup_txn);
