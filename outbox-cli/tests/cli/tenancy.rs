//! The tenant-scoped commands — `purge --tenant`, `purge --tenant-window`, `stats --tenant`,
//! `stats --endpoint`, `tenants list` — touch and count only their tenant, on SQLite and on
//! PostgreSQL.

use std::time::Duration;

use outboxkit_core::OsEntropy;
use serde_json::Value;

use crate::{id_after, outbox, sqlite_url};

/// `outbox ARGS --store … [--namespace …]`, expecting success, as JSON.
fn json(store: &[&str], args: &[&str]) -> Value {
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(store);
    all.push("--json");
    let out = outbox(&all).ok();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn run(store: &[&str], args: &[&str]) -> crate::Run {
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(store);
    outbox(&all)
}

fn enqueue(store: &[&str], tenant: &str, topic: &str, email: bool) {
    let mut args = vec![
        "enqueue",
        "--tenant",
        tenant,
        "--topic",
        topic,
        "--data",
        "{\"n\":1}",
    ];
    if email {
        args.extend(["--email", "ops@example.com"]);
    }
    run(store, &args).ok();
}

fn tenant<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["tenants"]
        .as_array()
        .expect("a tenants array")
        .iter()
        .find(|t| t["tenant"] == name)
        .unwrap_or_else(|| panic!("{name} not listed in {list}"))
}

/// The whole scenario against one store.
fn scenario(store: &[&str]) {
    run(store, &["migrate"]).ok();
    let out = run(
        store,
        &[
            "endpoints",
            "add",
            "--tenant",
            "alpha",
            "--url",
            "http://127.0.0.1:9/hook",
            "--filter",
            "order.*",
            "--allow-http",
            "--allow-private",
        ],
    )
    .ok();
    let ep = id_after(&out, "created endpoint ");
    // alpha: two orders (a webhook and an e-mail delivery each) and one message nothing
    // receives; beta: one order (e-mail only: the endpoint is alpha's) and two such messages.
    enqueue(store, "alpha", "order.created", true);
    enqueue(store, "alpha", "order.created", true);
    enqueue(store, "alpha", "user.created", false);
    enqueue(store, "beta", "order.created", true);
    enqueue(store, "beta", "user.created", false);
    enqueue(store, "beta", "user.created", false);

    let all = json(store, &["stats"]);
    assert_eq!(
        (all["pending"].as_u64(), all["total"].as_u64()),
        (Some(5), Some(5))
    );
    assert_eq!(all["tenant"], Value::Null);
    let alpha = json(store, &["stats", "--tenant", "alpha"]);
    assert_eq!(
        (alpha["pending"].as_u64(), alpha["tenant"].as_str()),
        (Some(4), Some("alpha"))
    );
    let at = alpha["oldest_due_at"].as_str().expect("an RFC 3339 time");
    assert!(at.ends_with('Z') && at.contains('T'), "{at}");
    assert!(alpha["oldest_due_age_ms"].is_u64(), "{alpha}");
    let beta = json(store, &["stats", "--tenant", "beta"]);
    assert_eq!(beta["total"].as_u64(), Some(1));
    let hook = json(store, &["stats", "--tenant", "alpha", "--endpoint", &ep]);
    assert_eq!(
        (hook["total"].as_u64(), hook["endpoint"].as_str()),
        (Some(2), Some(ep.as_str()))
    );
    let cross = run(store, &["stats", "--tenant", "beta", "--endpoint", &ep]);
    assert_eq!(
        cross.code, 1,
        "another tenant's endpoint is not found: {cross:?}"
    );

    let list = json(store, &["tenants", "list"]);
    let names: Vec<&str> = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(
        (
            tenant(&list, "alpha")["messages"].as_u64(),
            tenant(&list, "alpha")["total"].as_u64()
        ),
        (Some(3), Some(4))
    );
    assert_eq!(
        (
            tenant(&list, "beta")["messages"].as_u64(),
            tenant(&list, "beta")["pending"].as_u64()
        ),
        (Some(3), Some(1))
    );
    let text = run(store, &["tenants", "list"]).ok();
    assert!(text.contains("alpha") && text.contains("beta"), "{text}");

    // Let the messages age past a zero window.
    std::thread::sleep(Duration::from_millis(20));
    let r = json(store, &["purge", "--older-than", "0s", "--tenant", "beta"]);
    assert_eq!(
        (
            r["tenant"].as_str(),
            r["messages"].as_u64(),
            r["deliveries"].as_u64()
        ),
        (Some("beta"), Some(2), Some(0))
    );
    let list = json(store, &["tenants", "list"]);
    assert_eq!(tenant(&list, "beta")["messages"].as_u64(), Some(1));
    assert_eq!(
        tenant(&list, "alpha")["messages"].as_u64(),
        Some(3),
        "purge --tenant beta must not touch alpha"
    );

    // alpha keeps its rows for a day: the rotating purge passes it by.
    let r = json(
        store,
        &["purge", "--older-than", "0s", "--tenant-window", "alpha=1d"],
    );
    assert_eq!(r["messages"].as_u64(), Some(0), "{r}");
    assert_eq!(
        tenant(&json(store, &["tenants", "list"]), "alpha")["messages"].as_u64(),
        Some(3)
    );
    let bad = run(
        store,
        &["purge", "--older-than", "0s", "--tenant-window", "alpha"],
    );
    assert_eq!(bad.code, 2, "{bad:?}");
    let r = json(store, &["purge", "--older-than", "0s"]);
    assert_eq!(r["messages"].as_u64(), Some(1), "{r}");
    let list = json(store, &["tenants", "list"]);
    assert_eq!(tenant(&list, "alpha")["messages"].as_u64(), Some(2));
    assert_eq!(json(store, &["stats"])["total"].as_u64(), Some(5));
}

#[test]
fn tenant_scoped_commands_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    scenario(&["--store", &url]);
}

#[tokio::test]
async fn tenant_scoped_commands_on_postgres() {
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
    let mut b = [0u8; 6];
    outboxkit_core::Entropy::fill(&OsEntropy, &mut b);
    let ns = format!(
        "cli_tenancy_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    );
    tokio::task::spawn_blocking(move || {
        scenario(&["--store", url.as_str(), "--namespace", ns.as_str()])
    })
    .await
    .unwrap();
}
