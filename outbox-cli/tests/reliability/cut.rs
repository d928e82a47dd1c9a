//! Part 2, **Database cut.** Three relays drain 4,000 deliveries; at 20 % and at 40 % of the way
//! the workers lose their database:
//!
//! - PostgreSQL: `pg_terminate_backend` on every backend whose `application_name` is the one
//!   the relays were given (`?application_name=` in `--store`); the second cut repeats it
//!   every 50 ms for 2 s, so reconnections are cut too.
//! - Redis: `CLIENT KILL ADDR` for every connection of the relay processes (found through
//!   `/proc/<pid>/fd` and `/proc/net/tcp`: the sockets whose peer is the Redis port); the
//!   second cut repeats it for 2 s.
//! - SQLite: a thread with its own connection holds the write lock (`BEGIN IMMEDIATE`), for
//!   2 s, then for 6 s (past the relays' 5 s busy timeout, so their statements fail).
//!
//! The workers must recover without a restart (the same three processes run to the end) and
//! lose nothing; the time from the end of each cut to the next 50 deliveries (or the rest,
//! when fewer are left) is reported.

use std::collections::BTreeSet;
use std::time::Duration;

use outboxkit_core::Stopwatch;
use outboxkit_postgres::sqlx::{self, Connection};
use outboxkit_testing::WebhookReceiver;

use crate::audit::{
    all_deliveries, check_at_least_once, drained, enqueue_numbered, stats, time_until_received,
    wait_drained,
};
use crate::backend::{postgres_url, redis_url, Backend, Kind, Typed};
use crate::relay::{fast_flags, Workers};

const N: u64 = 4_000;

fn flags() -> Vec<String> {
    let mut f = fast_flags();
    f.push("--retry-schedule".into());
    f.push(["1s"; 10].join(","));
    f
}

/// Terminate the relays' Postgres backends; returns how many were terminated.
async fn cut_postgres(app_name: &str) -> u64 {
    let mut conn = sqlx::PgConnection::connect(&postgres_url())
        .await
        .expect("a control connection");
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity \
         WHERE application_name = $1 AND pid <> pg_backend_pid()) k WHERE t",
    )
    .bind(app_name)
    .fetch_one(&mut conn)
    .await
    .expect("terminate the relays' backends");
    let _ = conn.close().await;
    u64::try_from(n).unwrap_or(0)
}

fn redis_port() -> u16 {
    let url = redis_url();
    let rest = url.split("://").nth(1).unwrap_or("");
    let authority = rest.split('/').next().unwrap_or("");
    let hostport = authority.rsplit('@').next().unwrap_or("");
    hostport
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(6379)
}

/// The local `ip:port` of every TCP connection of process `pid` whose peer port is `port`.
fn connections_to(pid: u32, port: u16) -> Vec<String> {
    let mut inodes = BTreeSet::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path()) {
                let l = link.to_string_lossy();
                if let Some(inode) = l.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                    inodes.insert(inode.to_owned());
                }
            }
        }
    }
    let mut out = Vec::new();
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || !inodes.contains(f[9]) {
            continue;
        }
        let (Some(local), Some(remote)) = (decode_v4(f[1]), decode_v4(f[2])) else {
            continue;
        };
        if remote.1 == port {
            out.push(format!("{}:{}", local.0, local.1));
        }
    }
    out
}

/// `0100007F:1F90` → (`127.0.0.1`, 8080).
fn decode_v4(s: &str) -> Option<(std::net::Ipv4Addr, u16)> {
    let (ip, port) = s.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some((std::net::Ipv4Addr::from(ip.to_le_bytes()), port))
}

/// `CLIENT KILL ADDR` every Redis connection of the relays; returns how many were killed.
async fn cut_redis(pids: &[u32]) -> u64 {
    let client = redis::Client::open(redis_url()).expect("a redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a control connection");
    let port = redis_port();
    let mut killed = 0;
    for pid in pids {
        for addr in connections_to(*pid, port) {
            let r: redis::RedisResult<redis::Value> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ADDR")
                .arg(&addr)
                .query_async(&mut conn)
                .await;
            if r.is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

/// What the relays' connections look like (for a failure message).
async fn diagnose(b: &Backend, workers: &Workers) -> String {
    if !matches!(b.typed, Typed::Redis(_)) {
        return String::new();
    }
    let mut out = String::from("\n--- redis connections of the relays ---\n");
    let port = redis_port();
    let list: String = match redis::Client::open(redis_url()) {
        Ok(c) => match c.get_multiplexed_async_connection().await {
            Ok(mut conn) => redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut conn)
                .await
                .unwrap_or_default(),
            Err(_) => String::new(),
        },
        Err(_) => String::new(),
    };
    for pid in workers.pids() {
        for addr in connections_to(pid, port) {
            let seen = list
                .lines()
                .find(|l| l.contains(&format!("addr={addr} ")))
                .unwrap_or("(not a redis client)");
            out.push_str(&format!("pid {pid} {addr}: {seen}\n"));
        }
    }
    out
}

/// Hold the SQLite write lock from another connection for `hold`.
async fn lock_sqlite(path: std::path::PathBuf, hold: Duration) {
    tokio::task::spawn_blocking(move || {
        let conn = rusqlite::Connection::open(path).expect("open a second connection");
        conn.busy_timeout(Duration::from_secs(30))
            .expect("set a busy timeout");
        conn.execute_batch("BEGIN IMMEDIATE")
            .expect("take the write lock");
        std::thread::sleep(hold);
        conn.execute_batch("COMMIT")
            .expect("release the write lock");
    })
    .await
    .expect("the lock holder thread");
}

/// Cut number `round` (0 or 1); returns a description of what was done.
async fn cut(b: &Backend, workers: &Workers, round: usize) -> String {
    let rounds = if round == 0 { 1 } else { 40 };
    match &b.typed {
        Typed::Postgres(_) => {
            let mut total = 0;
            for i in 0..rounds {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                total += cut_postgres(&b.app_name).await;
            }
            assert!(total >= 3, "no relay backend was found to terminate");
            format!("{total} backends terminated")
        }
        Typed::Redis(_) => {
            let mut total = 0;
            for i in 0..rounds {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                total += cut_redis(&workers.pids()).await;
            }
            assert!(total >= 3, "no relay connection was found to kill");
            format!("{total} connections killed")
        }
        Typed::Sqlite(s) => {
            let hold = Duration::from_secs(if round == 0 { 2 } else { 6 });
            lock_sqlite(s.path().to_owned(), hold).await;
            format!("write lock held {} s", hold.as_secs())
        }
    }
}

async fn scenario(kind: Kind) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("cut/{}", kind.name());
    let receiver = WebhookReceiver::start().await.expect("start the receiver");
    let (_, secret) = b.endpoint(&receiver.url()).await;
    receiver.set_secrets(vec![secret]);
    let marker = crate::marker("cut");
    enqueue_numbered(&*b.store, "rel.cut", 0..N, 250, &marker).await;

    let clock = Stopwatch::start();
    let mut workers = Workers::start(&b, 3, flags());
    let mut notes = Vec::new();
    for (round, at) in [N / 5, N * 2 / 5].into_iter().enumerate() {
        let at = usize::try_from(at).unwrap_or(usize::MAX);
        if !receiver.wait_for(at, Duration::from_secs(90)).await {
            if let Err(e) = workers.check_alive() {
                panic!("[{name}] {e}");
            }
            panic!(
                "[{name}] only {} of {at} requests arrived",
                receiver.count()
            );
        }
        assert!(
            !drained(&stats(&*b.store).await, N),
            "[{name}] the queue drained before cut {round}: raise N"
        );
        let what = cut(&b, &workers, round).await;
        let from = receiver.count();
        // The relays keep delivering between the kills of a storm: the queue may drain
        // before the cut ends. Recovery is then measured on what is left (maybe nothing),
        // counted where it arrives, at the same moment as `from`: the store's `succeeded`
        // lags the receiver while completions wait out the cut (a request answered before
        // its completion is written, which is then retried, not resent), so it would ask
        // for arrivals that already happened.
        let arrived: BTreeSet<String> = receiver
            .requests()
            .iter()
            .filter_map(|r| r.webhook_id.clone())
            .collect();
        let left = N.saturating_sub(arrived.len() as u64);
        let want = usize::try_from(left.min(50)).unwrap_or(50);
        let recovered = time_until_received(&receiver, from, want, Duration::from_secs(60)).await;
        if let Err(e) = workers.check_alive() {
            panic!("[{name}] after cut {round} ({what}): {e}");
        }
        let Some(recovered) = recovered else {
            panic!(
                "[{name}] not {want} deliveries within 60 s after cut {round} ({what}); {:?}; \
                 the relays:\n{}",
                stats(&*b.store).await,
                workers.tails(15) + &diagnose(&b, &workers).await
            );
        };
        notes.push(if want == 0 {
            format!("cut {round}: {what}, the queue drained during the cut")
        } else {
            format!(
                "cut {round}: {what}, {want} more deliveries {:.2} s after it ended",
                recovered.as_secs_f64()
            )
        });
    }
    let (s, ok) = wait_drained(&*b.store, N, Duration::from_secs(90)).await;
    let took = clock.elapsed();
    if let Err(e) = workers.check_alive() {
        panic!("[{name}] {e}");
    }
    assert!(ok, "[{name}] the queue did not drain: {s:?}");
    assert_eq!(workers.started(), 3, "the workers were restarted");
    let clean = workers.stop().await;
    let deliveries = all_deliveries(&*b.store, &b.tenant).await;
    let d = check_at_least_once(N, &deliveries, &receiver.requests(), &marker);
    assert_eq!(s.dead, 0, "[{name}] dead deliveries: {s:?}");
    eprintln!(
        "[{name}] {N} deliveries, 3 workers, no restart: {}; drained in {:.1} s; \
         {} requests, {} duplicates (at most {} attempts); {clean}/3 stopped cleanly",
        notes.join("; "),
        took.as_secs_f64(),
        d.requests,
        d.duplicates,
        d.max_attempts,
    );
}

#[test]
fn postgres() {
    let _turn = crate::heavy_turn();
    crate::run(
        "cut/postgres",
        Duration::from_secs(300),
        scenario(Kind::Postgres),
    );
}

#[test]
fn sqlite() {
    let _turn = crate::heavy_turn();
    crate::run(
        "cut/sqlite",
        Duration::from_secs(300),
        scenario(Kind::Sqlite),
    );
}

#[test]
fn redis() {
    let _turn = crate::heavy_turn();
    crate::run("cut/redis", Duration::from_secs(300), scenario(Kind::Redis));
}
