//! Two services, A's outbox delivering to B's inbox, both killed with SIGKILL at random points
//! while a few thousand events flow: every event is applied exactly once.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    DynStore, EntropyExt, NewMessage, OsEntropy, PlaintextVault, Stats, SystemClock, TenantId,
};
use outboxkit_dispatch::{EndpointAdmin, NewEndpoint};
use outboxkit_http::EgressPolicy;
use outboxkit_postgres::sqlx::{self, postgres::PgPoolOptions, PgPool};
use outboxkit_postgres::{PostgresConfig, PostgresStore};

const N: i64 = 4_000;
const PAIR: &str = env!("CARGO_BIN_EXE_inbox-pair");

fn url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn require_backends() -> bool {
    std::env::var("OUTBOX_TEST_REQUIRE_BACKENDS").is_ok_and(|v| v == "1" || v == "true")
}

/// A free loopback port (bound, then released for the receiver).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Proc {
    args: Vec<String>,
    child: Option<Child>,
}

impl Proc {
    fn new(args: Vec<String>) -> Self {
        let mut p = Proc { args, child: None };
        p.start();
        p
    }

    fn start(&mut self) {
        let child = Command::new(PAIR)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start inbox-pair");
        self.child = Some(child);
    }

    /// SIGKILL and reap.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn effects(pool: &PgPool, schema: &str) -> (i64, i64) {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT count(*), count(DISTINCT webhook_id) FROM \"{schema}\".effects"
    )))
    .fetch_one(pool)
    .await
    .unwrap_or((0, 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_either_side_loses_nothing_and_applies_nothing_twice() {
    let pool = match PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url())
        .await
    {
        Ok(p) => p,
        Err(e) if require_backends() => panic!("postgres is required: {e}"),
        Err(e) => {
            eprintln!("*** SKIPPING: postgres is unreachable ({e}) ***");
            return;
        }
    };
    let (a, b) = (
        format!("pair_a_{}", std::process::id()),
        format!("pair_b_{}", std::process::id()),
    );
    for s in [&a, &b] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{s}\" CASCADE"
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
    let config = PostgresConfig {
        schema: a.clone(),
        ..PostgresConfig::default()
    };
    let clock = Arc::new(SystemClock);
    let entropy = Arc::new(OsEntropy);
    let store = PostgresStore::new(pool.clone(), config, clock.clone(), entropy.clone()).unwrap();
    store.migrate().await.unwrap();
    let store: Arc<DynStore> = Arc::new(store);
    let port = free_port();
    let egress = EgressPolicy::default().allow_http(true).allow_private(true);
    let admin = EndpointAdmin::new(store.clone(), Arc::new(PlaintextVault), clock, entropy)
        .with_url_policy(Arc::new(egress));
    let (_, secret) = admin
        .create(
            &TenantId::default(),
            NewEndpoint {
                url: format!("http://127.0.0.1:{port}/hooks"),
                filter: "*".into(),
                ..NewEndpoint::default()
            },
        )
        .await
        .unwrap();
    let batch: Vec<NewMessage> = (0..N)
        .map(|n| NewMessage::new("event.happened", serde_json::json!({ "n": n })))
        .collect();
    for chunk in batch.chunks(500) {
        store.enqueue_batch(chunk.to_vec()).await.unwrap();
    }

    let db = url();
    let mut receiver = Proc::new(vec![
        "receive".into(),
        "--db".into(),
        db.clone(),
        "--schema".into(),
        b.clone(),
        "--port".into(),
        port.to_string(),
        "--secret".into(),
        secret.expose(),
    ]);
    let mut sender = Proc::new(vec![
        "send".into(),
        "--db".into(),
        db,
        "--schema".into(),
        a.clone(),
    ]);

    // Kill one side or the other at random moments until every delivery succeeded.
    let rng = OsEntropy;
    let mut kills = 0;
    let mut stats = Stats::default();
    for _ in 0..600 {
        let pause = 200 + rng.next_u64() % 1_300;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        stats = store.stats().await.unwrap();
        if stats.succeeded + stats.dead == N as u64 {
            break;
        }
        if kills < 12 {
            let who = if rng.next_u64().is_multiple_of(2) {
                &mut receiver
            } else {
                &mut sender
            };
            who.kill();
            tokio::time::sleep(Duration::from_millis(100 + rng.next_u64() % 400)).await;
            who.start();
            kills += 1;
        }
    }
    sender.kill();
    receiver.kill();
    assert!(
        kills >= 3,
        "the events drained after only {kills} kills: not a test of kills"
    );
    assert_eq!(
        stats.succeeded, N as u64,
        "every delivery succeeded: {stats:?}"
    );
    assert_eq!(stats.dead, 0, "{stats:?}");
    let (applied, distinct) = effects(&pool, &b).await;
    assert_eq!(distinct, N, "nothing lost after {kills} kills");
    assert_eq!(applied, N, "nothing applied twice after {kills} kills");
    for s in [&a, &b] {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{s}\" CASCADE"
        )))
        .execute(&pool)
        .await;
    }
}
