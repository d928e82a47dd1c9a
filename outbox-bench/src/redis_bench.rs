//! Redis: enqueue (8 writers) and the dispatch burn-down, beside raw Lua scripts doing the
//! minimal same work (a message hash, a delivery hash, one due sorted set), the claim and
//! ack pipelined in one round trip.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    Clock, Consumer, ConsumerName, DeliveryId, EndpointStore, Entropy, MessageId, MessageStore,
    OsEntropy, Stopwatch, SystemClock, TopicFilter,
};
use outboxkit_redis::{RedisConfig, RedisStore};
use redis::aio::MultiplexedConnection;
use redis::Script;

use crate::common::load;
use crate::common::{
    burn_down, chunks, concurrently, err, message, payload, secs, unique, BenchResult, BurnDown,
    Progress, CONSUMER, TOPIC,
};
use crate::pg_dispatch::{burn_config, noop_dispatcher, BATCH, CONCURRENCY};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::timed::Timed;
use crate::Ctx;

pub(crate) const RAW_ENQUEUE: &str = r"
local p = KEYS[1]
local mid, did, now = ARGV[1], ARGV[2], ARGV[5]
redis.call('HSET', p .. ':m:' .. mid, 'tenant', 'default', 'topic', ARGV[3], 'payload', ARGV[4],
  'created', now)
redis.call('HSET', p .. ':d:' .. did, 'm', mid, 'status', 'pending', 'attempts', 0, 'next', now)
redis.call('ZADD', p .. ':q', now, did)
return 1
";

const RAW_CLAIM: &str = r"
local p = KEYS[1]
local now, lease, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', p .. ':q', '-inf', now, 'LIMIT', 0, n)
local out = {}
for i, id in ipairs(ids) do
  local dk = p .. ':d:' .. id
  local tok = ARGV[3 + i]
  local mid = redis.call('HGET', dk, 'm')
  redis.call('HSET', dk, 'status', 'processing', 'token', tok, 'lease', lease, 'next', lease)
  redis.call('HINCRBY', dk, 'attempts', 1)
  redis.call('ZADD', p .. ':q', lease, id)
  out[#out + 1] = id
  out[#out + 1] = tok
  out[#out + 1] = redis.call('HGET', p .. ':m:' .. mid, 'payload')
end
return out
";

const RAW_ACK: &str = r"
local p = KEYS[1]
local now = ARGV[1]
local n = 0
for i = 2, #ARGV, 2 do
  local id, tok = ARGV[i], ARGV[i + 1]
  local dk = p .. ':d:' .. id
  if redis.call('HGET', dk, 'token') == tok then
    redis.call('HSET', dk, 'status', 'succeeded', 'completed', now, 'token', '', 'lease', '')
    redis.call('ZREM', p .. ':q', id)
    n = n + 1
  end
end
return n
";

/// The Redis version when Redis answers at `url`.
pub async fn probe(url: &str) -> Option<String> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = tokio::time::timeout(
        Duration::from_secs(3),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_owned())
}

pub(crate) async fn connection(url: &str) -> BenchResult<MultiplexedConnection> {
    redis::Client::open(url)
        .map_err(|e| format!("redis url: {e}"))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("redis connect: {e}"))
}

/// Delete every key under `prefix`.
pub(crate) async fn cleanup(url: &str, prefix: &str) {
    let Ok(mut conn) = connection(url).await else {
        return;
    };
    let mut cursor: u64 = 0;
    loop {
        let r: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(5000)
            .query_async(&mut conn)
            .await;
        let Ok((next, keys)) = r else { return };
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> =
                redis::cmd("UNLINK").arg(&keys).query_async(&mut conn).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// Run `body` with fresh prefixes for the store and the raw baseline; delete both after.
async fn with_prefixes<T, F, Fut>(ctx: &Ctx, body: F) -> BenchResult<T>
where
    F: FnOnce(String, String) -> Fut,
    Fut: std::future::Future<Output = BenchResult<T>>,
{
    let u = unique();
    let (ours, raw) = (format!("{{bench-{u}}}"), format!("{{bench-raw-{u}}}"));
    let r = body(ours.clone(), raw.clone()).await;
    cleanup(&ctx.redis_url, &ours).await;
    cleanup(&ctx.redis_url, &raw).await;
    r
}

pub(crate) async fn store(url: &str, prefix: &str) -> BenchResult<RedisStore> {
    let client = redis::Client::open(url).map_err(|e| format!("redis url: {e}"))?;
    let store = RedisStore::new(
        client,
        RedisConfig::with_prefix(prefix),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .map_err(err("redis store"))?;
    let consumer = Consumer {
        name: ConsumerName::new(CONSUMER).map_err(err("consumer"))?,
        filter: TopicFilter::all(),
        created_at: SystemClock.now(),
        status: outboxkit_core::ConsumerStatus::Active,
    };
    store
        .put_consumer(&consumer)
        .await
        .map_err(err("consumer"))?;
    Ok(store)
}

/// One raw enqueue of message `i` under `prefix`.
pub(crate) fn raw_enqueue<'a>(
    script: &'a Script,
    prefix: &str,
    i: usize,
) -> redis::ScriptInvocation<'a> {
    let now = SystemClock.now();
    let mut inv = script.prepare_invoke();
    inv.key(prefix)
        .arg(MessageId::generate(now, &OsEntropy).to_string())
        .arg(DeliveryId::generate(now, &OsEntropy).to_string())
        .arg(TOPIC)
        .arg(payload(i))
        .arg(now.as_unix_millis());
    inv
}

/// `n` raw enqueues under `prefix` from `writers` tasks on `conn`; the seconds they took.
pub(crate) async fn raw_enqueues(
    conn: &MultiplexedConnection,
    script: &Arc<Script>,
    prefix: &Arc<String>,
    n: usize,
    writers: usize,
) -> BenchResult<f64> {
    let (conn, script, prefix) = (conn.clone(), script.clone(), prefix.clone());
    concurrently(n, writers, move |i| {
        let (mut conn, script, prefix) = (conn.clone(), script.clone(), prefix.clone());
        async move {
            raw_enqueue(&script, &prefix, i)
                .invoke_async::<i64>(&mut conn)
                .await
                .map(|_| ())
                .map_err(|e| format!("raw enqueue: {e}"))
        }
    })
    .await
}

/// `n` messages through `store.enqueue` from `writers` tasks; the seconds they took.
pub(crate) async fn ours_enqueues(
    store: &RedisStore,
    n: usize,
    writers: usize,
) -> BenchResult<f64> {
    let st = store.clone();
    concurrently(n, writers, move |i| {
        let st = st.clone();
        async move {
            outboxkit_core::MessageStore::enqueue(&st, message(i))
                .await
                .map(|_| ())
                .map_err(err("enqueue"))
        }
    })
    .await
}

/// Enqueue from 8 writers: `store.enqueue` beside the raw script.
pub async fn enqueue(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(100_000);
    let writers = 8;
    let scenario = "redis enqueue, 1 msg per call, 8 writers";
    let reps = ctx.reps();
    let r = with_prefixes(ctx, |ours, raw| async move {
        let store = store(&ctx.redis_url, &ours).await?;
        let conn = connection(&ctx.redis_url).await?;
        let script = Arc::new(Script::new(RAW_ENQUEUE));
        let raw = Arc::new(raw);
        let (mut best_ours, mut best_raw) = (f64::MAX, f64::MAX);
        for _ in 0..reps {
            let ours_secs = ours_enqueues(&store, n, writers).await?;
            let raw_secs = raw_enqueues(&conn, &script, &raw, n, writers).await?;
            best_ours = best_ours.min(ours_secs);
            best_raw = best_raw.min(raw_secs);
        }
        Ok((best_ours, best_raw))
    })
    .await;
    match r {
        Ok((o, b)) => Row::measured(
            "redis-enqueue",
            scenario,
            ctx.scale.label(n),
            Figure::rate(per_second(n as u64, o)),
            Some(Figure::rate(per_second(n as u64, b))),
            Target::None,
            format!(
                "ours: store.enqueue (message, 1 delivery, indexes, counters); raw: one script \
                 writing a message hash, a delivery hash and a due-set entry; best of {reps}"
            ),
        ),
        Err(e) => Row::not_run("redis-enqueue", scenario, Target::None, Status::Error(e)),
    }
}

/// Hex claim tokens, one entropy read per batch.
fn tokens(n: usize) -> Vec<String> {
    let mut bytes = vec![0u8; n * 16];
    OsEntropy.fill(&mut bytes);
    bytes
        .chunks_exact(16)
        .map(|c| c.iter().map(|b| format!("{b:02x}")).collect())
        .collect()
}

/// The raw loop: each round trip acks the previous batch and claims the next.
pub(crate) async fn raw_burn(conn: &mut MultiplexedConnection, prefix: &str) -> BenchResult<u64> {
    let claim = Script::new(RAW_CLAIM);
    let ack = Script::new(RAW_ACK);
    for s in [&claim, &ack] {
        s.prepare_invoke()
            .load_async(conn)
            .await
            .map_err(|e| format!("load script: {e}"))?;
    }
    let mut pending: Vec<Vec<u8>> = Vec::new(); // id, token, id, token, …
    let mut done = 0u64;
    loop {
        let now = SystemClock.now().as_unix_millis();
        let mut pipe = redis::pipe();
        let mut a = ack.prepare_invoke();
        if !pending.is_empty() {
            a.key(prefix).arg(now).arg(&pending);
            pipe.invoke_script(&a);
        }
        let mut c = claim.prepare_invoke();
        c.key(prefix)
            .arg(now)
            .arg(now + 40_000)
            .arg(BATCH)
            .arg(tokens(BATCH as usize));
        pipe.invoke_script(&c);
        let out: Vec<redis::Value> = pipe
            .query_async(conn)
            .await
            .map_err(|e| format!("raw pipeline: {e}"))?;
        if !pending.is_empty() {
            let n: i64 = redis::from_redis_value_ref(&out[0]).map_err(|e| format!("ack: {e}"))?;
            done += n as u64;
        }
        let claimed: Vec<Vec<u8>> =
            redis::from_redis_value_ref(&out[out.len() - 1]).map_err(|e| format!("claim: {e}"))?;
        if claimed.is_empty() {
            return Ok(done);
        }
        pending.clear();
        for triple in claimed.chunks_exact(3) {
            std::hint::black_box(&triple[2]); // the no-op handler sees the payload
            pending.push(triple[0].clone());
            pending.push(triple[1].clone());
        }
    }
}

/// One burn-down of ours under a fresh prefix: the result and the time breakdown.
async fn ours_once(ctx: &Ctx, n: usize) -> BenchResult<(BurnDown, String)> {
    with_prefixes(ctx, |ours, _| async move {
        let store = store(&ctx.redis_url, &ours).await?;
        load(&store, n).await?;
        let timed = Arc::new(Timed::new(Arc::new(store.clone())));
        let progress = Progress::new(n as u64);
        let d = noop_dispatcher(timed.clone(), &progress, burn_config())?;
        let b = burn_down(&d, &progress, n as u64, None).await?;
        let stats = store.stats().await.map_err(err("stats"))?;
        if stats.succeeded != n as u64 {
            return Err(format!("{} of {n} deliveries succeeded", stats.succeeded));
        }
        let why = timed.spent.breakdown(b.secs);
        Ok((b, why))
    })
    .await
}

/// A raw backlog of `n` messages under `prefix`, written by the raw enqueue script in
/// pipelines of 1,000 (not timed).
pub(crate) async fn raw_load(
    conn: &mut MultiplexedConnection,
    prefix: &str,
    n: usize,
) -> BenchResult<()> {
    let script = Script::new(RAW_ENQUEUE);
    script
        .prepare_invoke()
        .load_async(conn)
        .await
        .map_err(|e| format!("load script: {e}"))?;
    for c in chunks(n, 1000) {
        let mut pipe = redis::pipe();
        for i in c {
            pipe.invoke_script(&raw_enqueue(&script, prefix, i))
                .ignore();
        }
        let () = pipe
            .query_async(conn)
            .await
            .map_err(|e| format!("raw load: {e}"))?;
    }
    Ok(())
}

/// One run of the raw loop under a fresh prefix.
async fn raw_once(ctx: &Ctx, n: usize) -> BenchResult<f64> {
    with_prefixes(ctx, |_, raw| async move {
        let mut conn = connection(&ctx.redis_url).await?;
        raw_load(&mut conn, &raw, n).await?;
        let sw = Stopwatch::start();
        let done = raw_burn(&mut conn, &raw).await?;
        let raw_secs = secs(&sw);
        if done != n as u64 {
            return Err(format!("the raw loop completed {done} of {n}"));
        }
        Ok(per_second(n as u64, raw_secs))
    })
    .await
}

/// The burn-down beside the raw pipelined claim/ack scripts, alternating `reps` times;
/// the best rate of each is kept.
pub async fn dispatch(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(100_000);
    let scenario = "redis dispatch burn-down, no-op handler";
    let target = Target::MinRatio(0.5);
    let reps = ctx.reps();
    let r = async {
        let mut best: Option<(BurnDown, String)> = None;
        let mut best_raw = 0.0f64;
        for _ in 0..reps {
            let o = ours_once(ctx, n).await?;
            if best.as_ref().is_none_or(|b| o.0.rate > b.0.rate) {
                best = Some(o);
            }
            best_raw = best_raw.max(raw_once(ctx, n).await?);
        }
        best.map(|b| (b, best_raw))
            .ok_or_else(|| "no repetition ran".to_owned())
    }
    .await;
    match r {
        Ok(((b, why), raw)) => Row::measured(
            "redis-dispatch",
            scenario,
            ctx.scale.label(n),
            Figure::rate(b.rate),
            Some(Figure::rate(raw)),
            target,
            format!(
                "batch {BATCH}, concurrency {CONCURRENCY} (mean claim {:.0}); ours: {why}; raw: \
                 claim script of 100 + ack script, pipelined (1 round trip per batch); best of \
                 {reps}",
                b.mean_batch
            ),
        ),
        Err(e) => Row::not_run("redis-dispatch", scenario, target, Status::Error(e)),
    }
}

/// The cluster's seed URLs from `OUTBOX_BENCH_REDIS_CLUSTER` (comma-separated
/// `redis://host:port`, or one `redis+cluster://h1:p1,h2:p2`).
fn cluster_seeds() -> Option<Vec<String>> {
    let v = std::env::var("OUTBOX_BENCH_REDIS_CLUSTER").ok()?;
    let v = v.trim();
    if let Some(hosts) = v.strip_prefix("redis+cluster://") {
        return Some(hosts.split(',').map(|h| format!("redis://{h}")).collect());
    }
    Some(v.split(',').map(str::to_owned).collect())
}

/// One burn-down of ours with `shards` shards: on one server when `seeds` is `None`, else
/// on the cluster. Messages belong to one of 64 tenants (no ordering key), so they spread
/// over the shards and the claim's rounds; an ordering key per message would instead hold
/// every key's backlog behind its barrier, which a claim walks past.
async fn sharded_once(
    ctx: &Ctx,
    seeds: Option<&[String]>,
    shards: u16,
    n: usize,
) -> BenchResult<BurnDown> {
    let prefix = format!("{{bench-{}}}", unique());
    let mut config = RedisConfig::with_prefix(&prefix);
    config.shards = shards;
    let store = match seeds {
        None => {
            let client = redis::Client::open(ctx.redis_url.as_str())
                .map_err(|e| format!("redis url: {e}"))?;
            RedisStore::new(client, config, Arc::new(SystemClock), Arc::new(OsEntropy)).await
        }
        Some(seeds) => {
            let nodes: Vec<&str> = seeds.iter().map(String::as_str).collect();
            RedisStore::new_cluster(&nodes, config, Arc::new(SystemClock), Arc::new(OsEntropy))
                .await
        }
    }
    .map_err(err("redis store"))?;
    let consumer = Consumer {
        name: ConsumerName::new(CONSUMER).map_err(err("consumer"))?,
        filter: TopicFilter::all(),
        created_at: SystemClock.now(),
        status: outboxkit_core::ConsumerStatus::Active,
    };
    store
        .put_consumer(&consumer)
        .await
        .map_err(err("consumer"))?;
    let r = async {
        for c in chunks(n, 1000) {
            let batch = c
                .map(|i| message(i).tenant(format!("t{}", i % 64).as_str()))
                .collect();
            store.enqueue_batch(batch).await.map_err(err("load"))?;
        }
        let progress = Progress::new(n as u64);
        let d = noop_dispatcher(Arc::new(store.clone()), &progress, burn_config())?;
        let b = burn_down(&d, &progress, n as u64, None).await?;
        let stats = store.stats().await.map_err(err("stats"))?;
        if stats.succeeded != n as u64 {
            return Err(format!("{} of {n} deliveries succeeded", stats.succeeded));
        }
        Ok(b)
    }
    .await;
    match seeds {
        None => cleanup(&ctx.redis_url, &prefix).await,
        Some(seeds) => {
            let stem = prefix.trim_end_matches('}');
            for url in seeds {
                cleanup(url, stem).await;
            }
        }
    }
    r
}

/// The burn-down on one server (one shard) beside a Redis Cluster with three shards, same
/// messages (64 tenants). On a small machine the point is that it scales out
/// correctly, not a speed-up: the figure is reported, with no target.
pub async fn cluster(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(20_000);
    let scenario = "redis dispatch burn-down: 3-node cluster, 3 shards vs one server";
    let Some(seeds) = cluster_seeds() else {
        return Row::not_run(
            "redis-cluster",
            scenario,
            Target::None,
            Status::Skipped("set OUTBOX_BENCH_REDIS_CLUSTER to the cluster's seed urls".into()),
        );
    };
    let r = async {
        let single = sharded_once(ctx, None, 1, n).await?;
        let sharded = sharded_once(ctx, Some(&seeds), 3, n).await?;
        Ok::<_, String>((single, sharded))
    }
    .await;
    match r {
        Ok((single, sharded)) => Row::measured(
            "redis-cluster",
            scenario,
            ctx.scale.label(n),
            Figure::rate(sharded.rate),
            Some(Figure::rate(single.rate)),
            Target::None,
            format!(
                "batch {BATCH}, concurrency {CONCURRENCY}; 64 tenants; baseline: one \
                 server, one shard (mean claim {:.0}); cluster mean claim {:.0}",
                single.mean_batch, sharded.mean_batch
            ),
        ),
        Err(e) => Row::not_run("redis-cluster", scenario, Target::None, Status::Error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_hex() {
        let t = tokens(3);
        assert_eq!(t.len(), 3);
        assert!(t
            .iter()
            .all(|x| x.len() == 32 && x.chars().all(|c| c.is_ascii_hexdigit())));
        assert_ne!(t[0], t[1]);
    }
}
