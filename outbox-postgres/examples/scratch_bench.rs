// Temporary scratch benchmark (deleted before reporting).
#![allow(clippy::disallowed_methods)]
use std::sync::Arc;
use std::time::Duration;

use outbox_core::*;
use outbox_postgres::sqlx::postgres::PgPoolOptions;
use outbox_postgres::{sqlx, PostgresConfig, PostgresStore};

static CLAIM_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static DONE_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
const URL: &str = "postgres://postgres@127.0.0.1:5432/test";

#[tokio::main]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let secs: u64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let pool = PgPoolOptions::new().max_connections(10).connect(URL).await.unwrap();
    sqlx::raw_sql("DROP SCHEMA IF EXISTS bench CASCADE").execute(&pool).await.unwrap();
    let store = PostgresStore::new(pool.clone(), PostgresConfig::new("bench"), Arc::new(SystemClock), Arc::new(OsEntropy)).unwrap();
    store.migrate().await.unwrap();
    if let Ok(extra) = std::env::var("EXTRA_SQL") { sqlx::raw_sql(&extra).execute(&pool).await.unwrap(); }
    let no_attempt = std::env::var("NO_ATTEMPT").is_ok();
    store.put_consumer(&Consumer { name: ConsumerName::new("worker").unwrap(), filter: TopicFilter::all(), created_at: SystemClock.now() }).await.unwrap();
    sqlx::raw_sql("CREATE TABLE bench.raw (id uuid primary key, topic text, payload bytea, created_at bigint); CREATE TABLE bench.q (id bigserial primary key, status text not null, next_at bigint not null, payload bytea); CREATE INDEX ON bench.q (next_at, id) WHERE status = 'pending'").execute(&pool).await.unwrap();
    match mode.as_str() {
        "enqueue" | "raw_insert" => {
            let mut tasks = vec![];
            for _ in 0..8 {
                let (store, pool, mode) = (store.clone(), pool.clone(), mode.clone());
                tasks.push(tokio::spawn(async move {
                    let sw = Stopwatch::start();
                    let mut n = 0u64;
                    while sw.elapsed() < Duration::from_secs(secs) {
                        if mode == "enqueue" {
                            store.enqueue(NewMessage::new("order.created", serde_json::json!({"n": n}))).await.unwrap();
                        } else {
                            let id = MessageId::generate(SystemClock.now(), &OsEntropy).as_uuid();
                            sqlx::query("INSERT INTO bench.raw (id, topic, payload, created_at) VALUES ($1, $2, $3, $4)")
                                .bind(id).bind("order.created").bind(serde_json::to_vec(&serde_json::json!({"n": n})).unwrap()).bind(SystemClock.now().as_unix_millis())
                                .execute(&pool).await.unwrap();
                        }
                        n += 1;
                    }
                    n
                }));
            }
            let mut total = 0;
            for t in tasks { total += t.await.unwrap(); }
            println!("{mode}: {:.0}/s", total as f64 / secs as f64);
        }
        "dispatch" | "raw_dispatch" => {
            let n = 100_000usize;
            if mode == "dispatch" {
                for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
                    store.enqueue_batch(chunk.iter().map(|i| NewMessage::new("order.created", serde_json::json!({"n": i}))).collect()).await.unwrap();
                }
            } else {
                sqlx::query("INSERT INTO bench.q (status, next_at, payload) SELECT 'pending', 0, convert_to('{\"n\": ' || g || '}', 'UTF8') FROM generate_series(1, $1) g").bind(n as i64).execute(&pool).await.unwrap();
            }
            sqlx::raw_sql("VACUUM ANALYZE bench.deliveries").execute(&pool).await.unwrap(); sqlx::raw_sql("VACUUM ANALYZE bench.q").execute(&pool).await.unwrap();
            let sw = Stopwatch::start();
            let mut tasks = vec![];
            for _ in 0..4 {
                let (store, pool, mode) = (store.clone(), pool.clone(), mode.clone());
                tasks.push(tokio::spawn(async move {
                    let no_attempt = no_attempt;
                    let req = ClaimRequest::new(250, Duration::from_secs(60)).handler(ConsumerName::new("worker").unwrap(), 8);
                    let mut done = 0usize;
                    loop {
                        if mode == "dispatch" {
                            let t0 = Stopwatch::start();
                            let c = store.claim(&req).await.unwrap();
                            CLAIM_US.fetch_add(t0.elapsed().as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
                            if c.is_empty() { break; }
                            let now = SystemClock.now();
                            let items: Vec<_> = c.into_iter().map(|c| (c.lease, Completion { verdict: Verdict::Succeeded, attempt: if no_attempt { None } else { Some(AttemptRecord { started_at: now, finished_at: now, outcome: AttemptOutcome::Succeeded, status_code: None, excerpt: None }) } })).collect();
                            done += items.len();
                            let t1 = Stopwatch::start();
                            for r in store.complete_many(&items).await.unwrap() { r.unwrap(); }
                            DONE_US.fetch_add(t1.elapsed().as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
                        } else {
                            let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as("UPDATE bench.q SET status = 'processing', next_at = $1 WHERE id IN (SELECT id FROM bench.q WHERE status = 'pending' AND next_at <= $2 ORDER BY next_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING id, payload")
                                .bind(SystemClock.now().as_unix_millis() + 60_000).bind(SystemClock.now().as_unix_millis()).bind(250i64).fetch_all(&pool).await.unwrap();
                            if rows.is_empty() { break; }
                            let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
                            done += ids.len();
                            sqlx::query("UPDATE bench.q SET status = 'done' FROM unnest($1::int8[]) u(id) WHERE bench.q.id = u.id AND status = 'processing'").bind(ids).execute(&pool).await.unwrap();
                        }
                    }
                    done
                }));
            }
            let mut total = 0;
            for t in tasks { total += t.await.unwrap(); }
            println!("claim {} ms, complete {} ms (summed over tasks)", CLAIM_US.load(std::sync::atomic::Ordering::Relaxed)/1000, DONE_US.load(std::sync::atomic::Ordering::Relaxed)/1000);
            println!("{mode}: {total} in {:?} = {:.0}/s", sw.elapsed(), total as f64 / sw.elapsed().as_secs_f64());
        }
        m if m.starts_with("sql:") => {
            let sql = std::fs::read_to_string(&m[4..]).unwrap().replace("\"planx\"", "\"bench\"");
            println!("{m}: {:.0}/s", variant(&pool, &sql, secs).await);
        }
        _ => println!("mode?"),
    }
}

#[allow(dead_code)]
pub async fn variant(pool: &sqlx::PgPool, sql: &str, secs: u64) -> f64 {
    let mut tasks = vec![];
    for _ in 0..8 {
        let (pool, sql) = (pool.clone(), sql.to_owned());
        tasks.push(tokio::spawn(async move {
            let sw = Stopwatch::start();
            let mut n = 0u64;
            while sw.elapsed() < Duration::from_secs(secs) {
                let now = SystemClock.now();
                let id = MessageId::generate(now, &OsEntropy).as_uuid();
                let base = DeliveryId::generate(now, &OsEntropy).as_uuid();
                let b = base.as_bytes();
                let lo = i64::from_be_bytes(b[8..].try_into().unwrap());
                sqlx::query(&sql).bind(id).bind("default").bind("order.created").bind(serde_json::to_vec(&serde_json::json!({"n": n})).unwrap())
                    .bind(None::<String>).bind(None::<String>).bind(now.as_unix_millis()).bind(None::<String>).bind(None::<String>).bind(now.as_unix_millis())
                    .bind(b[..8].to_vec()).bind(lo).bind(Vec::<String>::new()).bind("outbox_wake_bench")
                    .execute(&pool).await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks { total += t.await.unwrap(); }
    total as f64 / secs as f64
}
