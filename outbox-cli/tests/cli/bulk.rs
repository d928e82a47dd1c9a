//! Bulk `replay`, `retry` and `release-held` by filter, with `--dry-run` and for real, on
//! SQLite and PostgreSQL; `relay --until-idle` makes the held deliveries.

use std::time::Duration;

use outboxkit_testing::WebhookReceiver;
use serde_json::Value;

use crate::{id_after, outbox, outbox_cmd, sqlite_url};

/// `outbox ARGS --store … --namespace … --json`, parsed.
fn json(store: &[String], args: &[&str]) -> Value {
    let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    full.extend(store.iter().cloned());
    full.push("--json".into());
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    let out = outbox(&refs).ok();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{full:?}: {e}: {out}"))
}

fn run(store: &[String], args: &[&str]) -> crate::Run {
    let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    full.extend(store.iter().cloned());
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    outbox(&refs)
}

fn counts(store: &[String]) -> (u64, u64, u64) {
    let s = json(store, &["stats"]);
    (
        s["pending"].as_u64().unwrap(),
        s["held"].as_u64().unwrap(),
        s["dead"].as_u64().unwrap(),
    )
}

async fn scenario(store: Vec<String>) {
    let receiver = WebhookReceiver::start().await.unwrap();
    receiver.refuse(401);
    let add = |url: &str| {
        let out = run(
            &store,
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
        id_after(&out, "created endpoint ")
    };
    let held_ep = add(&receiver.url());
    let gone_ep = add("http://127.0.0.1:9/hook");
    for (topic, n) in [("order.created", 3), ("user.created", 2)] {
        for i in 0..n {
            run(
                &store,
                &[
                    "enqueue",
                    "--topic",
                    topic,
                    "--data",
                    &format!(r#"{{"i":{i}}}"#),
                ],
            )
            .ok();
        }
    }
    // Deleting an endpoint kills its pending deliveries (dead: endpoint-removed).
    run(&store, &["endpoints", "delete", &gone_ep]).ok();
    // 401 holds the other endpoint's deliveries; the relay then has nothing due and exits.
    let report = json(
        &store,
        &["relay", "--until-idle", "--allow-http", "--allow-private"],
    );
    assert_eq!(report["held"], 5, "{report}");
    assert!(report["run_time_ms"].is_u64(), "{report}");
    assert_eq!(counts(&store), (0, 5, 5));

    // replay by dead reason and topic: a dry run changes nothing.
    let dry = json(
        &store,
        &[
            "replay",
            "--dead-reason",
            "endpoint-removed",
            "--topic",
            "order.created",
            "--since",
            "1h",
            "--dry-run",
        ],
    );
    assert_eq!(
        (&dry["matched"], &dry["would_change"], &dry["changed"]),
        (&Value::from(3), &Value::from(3), &Value::from(0)),
        "{dry}"
    );
    assert_eq!(counts(&store), (0, 5, 5));
    let text = run(&store, &["replay", "--endpoint", &gone_ep, "--dry-run"]).ok();
    assert!(text.contains("would affect 5"), "{text}");
    let done = json(
        &store,
        &[
            "replay",
            "--dead-reason",
            "endpoint-removed",
            "--topic",
            "order.created",
        ],
    );
    assert_eq!(done["changed"], 3, "{done}");
    assert_eq!(counts(&store), (3, 5, 2));
    // No delivery of another reason matches.
    let none = json(
        &store,
        &["replay", "--dead-reason", "max_attempts", "--all"],
    );
    assert_eq!(none["matched"], 0, "{none}");

    // release-held by endpoint and topic, then retry by status, then by endpoint alone.
    let dry = json(
        &store,
        &[
            "release-held",
            "--endpoint",
            &held_ep,
            "--topic",
            "user.created",
            "--dry-run",
        ],
    );
    assert_eq!(dry["matched"], 2, "{dry}");
    assert_eq!(counts(&store), (3, 5, 2));
    let done = json(
        &store,
        &[
            "release-held",
            "--endpoint",
            &held_ep,
            "--topic",
            "user.created",
        ],
    );
    assert_eq!(done["changed"], 2, "{done}");
    assert_eq!(counts(&store), (5, 3, 2));
    let dry = json(
        &store,
        &[
            "retry",
            "--status",
            "held",
            "--endpoint",
            &held_ep,
            "--dry-run",
        ],
    );
    assert_eq!(dry["matched"], 3, "{dry}");
    assert!(dry["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["status"] == "held"));
    assert_eq!(counts(&store), (5, 3, 2));
    let text = run(&store, &["release-held", "--endpoint", &held_ep]).ok();
    assert!(text.contains("released 3"), "{text}");
    assert_eq!(counts(&store), (8, 0, 2));
    let done = json(
        &store,
        &["retry", "--until", "0s", "--topic", "order.created"],
    );
    assert_eq!(done["changed"], 6, "{done}");

    // A bulk run needs a filter (or --all); an id excludes filters.
    let r = run(&store, &["retry"]);
    assert_eq!(r.code, 2, "{r:?}");
    let id = dry["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let r = run(&store, &["retry", &id, "--topic", "order.created"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = run(&store, &["retry", "--status", "dead", "--all"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(counts(&store), (8, 0, 2));
}

// The receiver is served by the runtime while this test blocks on child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_operations_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &store]).ok();
    scenario(vec!["--store".into(), store]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_operations_on_postgres() {
    let url = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    match sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
    {
        Ok(p) => p.close().await,
        Err(e) => {
            return outboxkit_testing::conformance::backend_unavailable::<()>("postgres", e)
                .unwrap_or(())
        }
    }
    let mut b = [0u8; 6];
    outboxkit_core::Entropy::fill(&outboxkit_core::OsEntropy, &mut b);
    let ns = format!(
        "cli_bulk_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    );
    let store = vec![
        "--store".to_owned(),
        url.clone(),
        "--namespace".to_owned(),
        ns.clone(),
    ];
    let migrated = outbox_cmd()
        .args(["migrate", "--store", &url, "--namespace", &ns])
        .output()
        .unwrap();
    assert!(migrated.status.success(), "{migrated:?}");
    let _drop = DropSchema { url, ns };
    scenario(store).await;
}

/// Drops the test's schema when the test ends, passed or failed.
struct DropSchema {
    url: String,
    ns: String,
}

impl Drop for DropSchema {
    fn drop(&mut self) {
        let (url, ns) = (self.url.clone(), self.ns.clone());
        // Inside the test's runtime: drop it from a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(pool) = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await
                {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "drop schema if exists {ns} cascade"
                    )))
                    .execute(&pool)
                    .await;
                }
            });
        })
        .join();
    }
}
