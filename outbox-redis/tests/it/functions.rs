//! The function library and its fallback, each on a `redis-server` of the test's own (a free
//! loopback port, no persistence), so deleting functions or changing ACLs touches no one else:
//! a library lost by the server (a restart without persistence, `FUNCTION FLUSH`) is loaded
//! again by the next call, which succeeds; a server that refuses `FUNCTION LOAD` gets the
//! scripts (`EVALSHA`), which reload after `SCRIPT FLUSH` as before.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{DeliveryStore, MessageStore, NewMessage, OperatorStore, OsEntropy};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_testing::conformance::backend_unavailable;
use outboxkit_testing::ManualClock;

use crate::common::{add_worker, claim_request, succeeded};

/// A `redis-server` of the test's own, stopped (killed) on drop.
struct Private {
    child: Child,
    port: u16,
}

impl Drop for Private {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Private {
    fn url(&self, user: Option<&str>) -> String {
        match user {
            Some(u) => format!("redis://{u}:any@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    async fn admin(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url(None))
            .expect("a redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("an admin connection")
    }

    /// `INFO commandstats` calls of `cmd` (0 when never called).
    async fn calls(&self, cmd: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.admin().await)
            .await
            .expect("info");
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|v| v.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }
}

async fn start() -> Option<Private> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return backend_unavailable("redis-server (private)", e),
    };
    let server = Private { child, port };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Some(server);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    backend_unavailable("redis-server (private)", "it did not listen within 5 s")
}

async fn open(url: &str, clock: &Arc<ManualClock>) -> RedisStore {
    let s = RedisStore::new(
        redis::Client::open(url).expect("a redis url"),
        RedisConfig::with_prefix("{outbox-fn}"),
        clock.clone(),
        Arc::new(OsEntropy),
    )
    .await
    .expect("a redis store");
    add_worker(&s, clock.as_ref()).await;
    s
}

/// Enqueue one message, claim it, complete it: every step must succeed.
async fn round_trip(s: &RedisStore) {
    let e = s
        .enqueue(NewMessage::new("job.run", serde_json::json!({})))
        .await
        .expect("enqueue");
    assert_eq!(e.deliveries, 1);
    let got = s.claim(&claim_request(10)).await.expect("claim");
    assert_eq!(got.len(), 1);
    let done = s
        .complete_many(&[(got[0].lease.clone(), succeeded())])
        .await
        .expect("complete");
    assert!(done[0].is_ok(), "{:?}", done[0]);
}

/// A server that lost the library (as after a restart without persistence) has it loaded
/// again by the very next call, which succeeds; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_library_is_loaded_again_by_the_next_call() {
    let Some(server) = start().await else { return };
    let clock = ManualClock::new();
    let s = open(&server.url(None), &clock).await;
    round_trip(&s).await;
    for _ in 0..2 {
        let _: () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut server.admin().await)
            .await
            .expect("function flush");
        round_trip(&s).await;
    }
    let stats = s.stats().await.expect("stats");
    assert_eq!((stats.succeeded, stats.pending), (3, 0));
    // Functions, not scripts, did the work.
    assert!(server.calls("fcall").await >= 9);
    assert_eq!(server.calls("evalsha").await, 0);
}

/// A user whose ACL refuses `FUNCTION` gets the scripts: every call works through
/// `EVALSHA`, and a flushed script cache is reloaded as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_functions_gets_the_scripts() {
    let Some(server) = start().await else { return };
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "nofn",
                "on",
                "nopass",
                "~*",
                "&*",
                "+@all",
                "-function",
            ][..],
        )
        .query_async(&mut server.admin().await)
        .await
        .expect("acl setuser");
    let clock = ManualClock::new();
    let s = open(&server.url(Some("nofn")), &clock).await;
    round_trip(&s).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut server.admin().await)
        .await
        .expect("script flush");
    round_trip(&s).await;
    let stats = s.stats().await.expect("stats");
    assert_eq!((stats.succeeded, stats.pending), (2, 0));
    assert!(server.calls("evalsha").await >= 6);
    assert_eq!(server.calls("fcall").await, 0);
    let libs: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut server.admin().await)
        .await
        .expect("function list");
    assert!(libs.is_empty(), "no library was loaded: {libs:?}");
}
