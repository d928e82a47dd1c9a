//! `relay` claims each delivery about once with its defaults (the per-endpoint cap does not
//! make it claim and release the same rows), reports claims per delivery, takes
//! `--endpoint-concurrency`, and `--until-idle` waits out an endpoint's rate limit.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    EndpointId, EndpointStore, MessageStore, NewMessage, OsEntropy, SystemClock, TenantId,
};
use outboxkit_testing::WebhookReceiver;
use serde_json::Value;

use crate::{id_after, namespace, outbox, sqlite_url};

fn run(store: &[String], args: &[&str]) -> crate::Run {
    let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    full.extend(store.iter().cloned());
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    outbox(&refs)
}

fn json(store: &[String], args: &[&str]) -> Value {
    let out = run(store, &[args, &["--json"]].concat()).ok();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// A migrated store with one endpoint at `url` and `n` messages to it; returns the endpoint
/// id. The binary migrates and adds the endpoint; the messages are enqueued through the
/// library on the same store (what `outbox enqueue` runs, one message per call, four calls
/// at a time), since starting one process per message only made the seeding slow.
fn seed(store: &[String], url: &str, n: usize) -> String {
    run(store, &["migrate"]).ok();
    let out = run(
        store,
        &[
            "endpoints",
            "add",
            "--url",
            url,
            "--allow-http",
            "--allow-private",
        ],
    )
    .ok();
    let ep = id_after(&out, "created endpoint ");
    tokio::runtime::Handle::current().block_on(enqueue_numbered(store, n));
    ep
}

/// Enqueue `{"i": i}` on `order.created` for the default tenant, for every `i` below `n`,
/// on the store `flags` name (`--store URL [--namespace NS]`, as the binary reads them).
async fn enqueue_numbered(flags: &[String], n: usize) {
    let flag = |name: &str| {
        flags
            .iter()
            .position(|f| f == name)
            .map(|i| flags[i + 1].clone())
    };
    let url = flag("--store").expect("a --store flag");
    let namespace = flag("--namespace").unwrap_or_else(|| "outbox".to_owned());
    let (clock, entropy) = (Arc::new(SystemClock), Arc::new(OsEntropy));
    let store: Arc<dyn MessageStore> = if let Some(path) = url.strip_prefix("sqlite:") {
        let config = outboxkit_sqlite::SqliteConfig::new(path);
        Arc::new(
            outboxkit_sqlite::SqliteStore::open(config, clock, entropy)
                .await
                .expect("open the sqlite store"),
        )
    } else if url.starts_with("postgres") {
        let config = outboxkit_postgres::PostgresConfig::new(namespace);
        let pool = config.connect_pool(&url).await.expect("a postgres pool");
        Arc::new(
            outboxkit_postgres::PostgresStore::new(pool, config, clock, entropy)
                .expect("a postgres store"),
        )
    } else {
        let config = outboxkit_redis::RedisConfig::with_prefix(format!("{{{namespace}}}"));
        Arc::new(
            outboxkit_redis::RedisStore::connect_with(&url, config)
                .await
                .expect("a redis store"),
        )
    };
    let part = |part: usize| {
        let store = store.clone();
        async move {
            for i in (part..n).step_by(4) {
                let m = NewMessage::new("order.created", serde_json::json!({ "i": i }))
                    .tenant("default");
                store.enqueue(m).await.expect("enqueue");
            }
        }
    };
    tokio::join!(part(0), part(1), part(2), part(3));
}

/// 400 deliveries to one endpoint, `relay --until-idle` with its defaults: every one
/// succeeds, and the relay claimed each about once (claims per delivery ≤ 1.1, a count).
fn claims_about_once(store: Vec<String>, receiver: &WebhookReceiver) -> f64 {
    seed(&store, &receiver.url(), 400);
    let r = json(
        &store,
        &["relay", "--until-idle", "--allow-http", "--allow-private"],
    );
    assert_eq!(r["succeeded"], 400, "{r}");
    let claimed = r["claimed"].as_f64().unwrap();
    let per = r["claims_per_delivery"]
        .as_f64()
        .unwrap_or_else(|| panic!("claims_per_delivery in {r}"));
    assert!(
        (per - claimed / 400.0).abs() < 1e-9,
        "claims per delivery is deliveries claimed ÷ deliveries settled: {r}"
    );
    assert!(
        per <= 1.1,
        "the relay claimed {claimed} times for 400 deliveries ({per:.2} per delivery)"
    );
    per
}

#[tokio::test]
async fn relay_claims_each_delivery_about_once_on_sqlite() {
    let receiver = WebhookReceiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = vec!["--store".to_owned(), sqlite_url(dir.path())];
    let r = tokio::task::spawn_blocking(move || claims_about_once(store, &receiver)).await;
    println!("sqlite claims per delivery: {:.3}", r.unwrap());
}

#[tokio::test]
async fn relay_claims_each_delivery_about_once_on_postgres() {
    let url = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    if let Err(e) = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
    {
        return outboxkit_testing::conformance::backend_unavailable::<()>("postgres", e)
            .unwrap_or(());
    }
    let receiver = WebhookReceiver::start().await.unwrap();
    let store = vec![
        "--store".to_owned(),
        url,
        "--namespace".to_owned(),
        namespace("cli_claims"),
    ];
    let r = tokio::task::spawn_blocking(move || claims_about_once(store, &receiver)).await;
    println!("postgres claims per delivery: {:.3}", r.unwrap());
}

#[tokio::test]
async fn relay_claims_each_delivery_about_once_on_redis() {
    let url =
        std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let reachable = match redis::Client::open(url.as_str()) {
        Ok(c) => c.get_multiplexed_async_connection().await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = reachable {
        return outboxkit_testing::conformance::backend_unavailable::<()>("redis", e).unwrap_or(());
    }
    let receiver = WebhookReceiver::start().await.unwrap();
    let store = vec![
        "--store".to_owned(),
        url,
        "--namespace".to_owned(),
        namespace("cli_claims"),
    ];
    let r = tokio::task::spawn_blocking(move || claims_about_once(store, &receiver)).await;
    println!("redis claims per delivery: {:.3}", r.unwrap());
}

/// `--endpoint-concurrency` caps the requests in flight to an endpoint, and a claim takes
/// no more than that lets start; 0 is refused and nothing is delivered.
#[tokio::test]
async fn relay_takes_endpoint_concurrency() {
    let receiver = WebhookReceiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = vec!["--store".to_owned(), sqlite_url(dir.path())];
    let url = receiver.url();
    let r = tokio::task::spawn_blocking(move || {
        seed(&store, &url, 40);
        let refused = run(
            &store,
            &[
                "relay",
                "--until-idle",
                "--allow-http",
                "--allow-private",
                "--endpoint-concurrency",
                "0",
            ],
        );
        assert_ne!(refused.code, 0);
        assert!(
            refused.stderr.contains("endpoint_concurrency"),
            "{}",
            refused.stderr
        );
        assert_eq!(json(&store, &["stats"])["pending"], 40, "nothing changed");
        json(
            &store,
            &[
                "relay",
                "--until-idle",
                "--allow-http",
                "--allow-private",
                "--endpoint-concurrency",
                "2",
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(r["succeeded"], 40, "{r}");
    assert!(r["claims_per_delivery"].as_f64().unwrap() <= 1.1, "{r}");
}

/// `--until-idle` with a rate-limited endpoint: the run waits for the limit's tokens and
/// exits with nothing left pending, every delivery sent.
#[tokio::test]
async fn relay_until_idle_waits_out_a_rate_limit() {
    let receiver = WebhookReceiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = vec!["--store".to_owned(), sqlite_url(dir.path())];
    let url = receiver.url();
    let seeded = store.clone();
    let ep = tokio::task::spawn_blocking(move || seed(&seeded, &url, 12))
        .await
        .unwrap();
    // The rate limit is set through the library (5 requests a second).
    let lib = outboxkit_sqlite::SqliteStore::open(
        outboxkit_sqlite::SqliteConfig::new(dir.path().join("outbox.sqlite")),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .unwrap();
    let update = outboxkit_core::EndpointUpdate {
        rate_limit: Some(Some(5)),
        ..Default::default()
    };
    lib.update_endpoint(
        &TenantId::new("default").unwrap(),
        EndpointId::parse(&ep).unwrap(),
        &update,
    )
    .await
    .unwrap();
    drop(lib);
    let r = tokio::task::spawn_blocking(move || {
        let r = json(
            &store,
            &["relay", "--until-idle", "--allow-http", "--allow-private"],
        );
        (r, json(&store, &["stats"]))
    })
    .await
    .unwrap();
    let (report, stats) = r;
    assert_eq!(report["succeeded"], 12, "{report}");
    assert_eq!(stats["pending"], 0, "{stats}");
    assert_eq!(receiver.count(), 12);
}
