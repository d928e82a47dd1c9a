//! Shared setup: stores on a random prefix, an admin connection, cleanup.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Clock, Completion, Consumer, ConsumerName, EndpointStore, EntropyExt, OsEntropy,
    TopicFilter, Verdict,
};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_testing::conformance::backend_unavailable;

pub fn url() -> String {
    std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A store with its own connection on `prefix`.
pub async fn store(prefix: &str, clock: Arc<dyn Clock>) -> RedisStore {
    let client = redis::Client::open(url()).expect("a redis url");
    RedisStore::new(
        client,
        RedisConfig::with_prefix(prefix),
        clock,
        Arc::new(OsEntropy),
    )
    .await
    .expect("a redis store")
}

/// A plain connection for the test's own commands.
pub async fn admin() -> redis::aio::MultiplexedConnection {
    redis::Client::open(url())
        .expect("a redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("an admin connection")
}

/// Every key under `prefix`.
pub async fn keys(prefix: &str) -> Vec<String> {
    let mut conn = admin().await;
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, mut batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("scan");
        out.append(&mut batch);
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

async fn cleanup(prefix: &str) {
    let all = keys(prefix).await;
    let mut conn = admin().await;
    for chunk in all.chunks(500) {
        let _: i64 = redis::cmd("DEL")
            .arg(chunk)
            .query_async(&mut conn)
            .await
            .expect("del");
    }
}

/// Run `body` with a fresh random prefix; delete the prefix's keys afterwards, pass or fail.
/// Skips loudly (or fails under `OUTBOX_TEST_REQUIRE_BACKENDS=1`) when Redis is down.
pub async fn isolated<F, Fut>(body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let probe = async {
        let client = redis::Client::open(url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    if let Err(e) = probe.await {
        backend_unavailable::<()>("redis", e);
        return;
    }
    let prefix = format!("{{outbox-it-{:016x}}}", OsEntropy.next_u64());
    let result = tokio::spawn(body(prefix.clone())).await;
    cleanup(&prefix).await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

pub fn worker() -> ConsumerName {
    ConsumerName::new("worker").expect("a consumer name")
}

/// Register the `worker` consumer for every topic.
pub async fn add_worker(store: &RedisStore, clock: &dyn Clock) {
    store
        .put_consumer(&Consumer {
            name: worker(),
            filter: TopicFilter::all(),
            created_at: clock.now(),
            status: outboxkit_core::ConsumerStatus::Active,
        })
        .await
        .expect("put consumer");
}

/// A claim of `batch` deliveries to `worker` under a 60 s lease.
pub fn claim_request(batch: u32) -> ClaimRequest {
    ClaimRequest::new(batch, Duration::from_secs(60)).handler(worker(), 10)
}

pub fn succeeded() -> Completion {
    Completion {
        verdict: Verdict::Succeeded,
        attempt: None,
    }
}
