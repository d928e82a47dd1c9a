//! Issue 31, "promises kept": defects found by using the binary as its users would.

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;

use outboxkit_core::{Ledger, MessageId, OsEntropy, SystemClock, TenantId};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use serde_json::Value;

use crate::{outbox, outbox_cmd, sqlite_url};

const FAITHFUL: &str = r#"{"id":12345678901234567890123,"amount":1.50,"a":1,"a":2}"#;

async fn stored_payload(dir: &std::path::Path, id: &str) -> Vec<u8> {
    let store = SqliteStore::open(
        SqliteConfig::new(dir.join("outbox.sqlite")),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .unwrap();
    let id: MessageId = id.parse().unwrap();
    store
        .get_message(&TenantId::default(), id)
        .await
        .unwrap()
        .payload
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_stores_the_payload_bytes_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let inline = outbox(&[
        "enqueue", "--store", s, "--topic", "a.b", "--data", FAITHFUL, "--json",
    ])
    .ok();
    let v: Value = serde_json::from_str(&inline).unwrap();
    let id = v["message_id"].as_str().unwrap().to_owned();
    assert_eq!(stored_payload(dir.path(), &id).await, FAITHFUL.as_bytes());

    // From a file and from stdin, whitespace and all.
    let spaced = format!(" {FAITHFUL}\n");
    let file = dir.path().join("p.json");
    std::fs::write(&file, &spaced).unwrap();
    let at = format!("@{}", file.display());
    let v: Value = serde_json::from_str(
        &outbox(&[
            "enqueue", "--store", s, "--topic", "a.b", "--data", &at, "--json",
        ])
        .ok(),
    )
    .unwrap();
    let id = v["message_id"].as_str().unwrap().to_owned();
    assert_eq!(stored_payload(dir.path(), &id).await, spaced.as_bytes());

    let mut child = outbox_cmd()
        .args([
            "enqueue", "--store", s, "--topic", "a.b", "--data", "-", "--json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(FAITHFUL.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["message_id"].as_str().unwrap().to_owned();
    assert_eq!(stored_payload(dir.path(), &id).await, FAITHFUL.as_bytes());

    // Not JSON: refused, nothing written.
    let r = outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", "{nope"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("not JSON"), "{r:?}");
    let stats: Value =
        serde_json::from_str(&outbox(&["tenants", "list", "--store", s, "--json"]).ok()).unwrap();
    assert_eq!(stats["tenants"][0]["messages"], 3, "{stats}");
}

#[test]
fn purge_and_stats_help_says_every_tenant_without_tenant() {
    for cmd in ["purge", "stats"] {
        let help = outbox(&[cmd, "--help"]).ok();
        let line = help
            .lines()
            .skip_while(|l| !l.contains("--tenant <"))
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(line.contains("every tenant"), "{cmd}: {line}");
        assert!(
            !line.contains("(`default` when not given)"),
            "{cmd}: {line}"
        );
    }
    // And the behaviour the help now describes: without --tenant, every tenant.
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    for t in ["alpha", "beta"] {
        outbox(&[
            "enqueue",
            "--store",
            s,
            "--tenant",
            t,
            "--topic",
            "a.b",
            "--data",
            "{}",
            "--email",
            "x@example.com",
        ])
        .ok();
    }
    let all: Value =
        serde_json::from_str(&outbox(&["stats", "--store", s, "--json"]).ok()).unwrap();
    assert_eq!(all["tenant"], Value::Null, "{all}");
    assert_eq!(all["pending"], 2, "{all}");
}

#[test]
fn json_log_format_prints_a_fatal_error_as_one_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = sqlite_url(dir.path());
    let r = outbox(&["--log-format", "json", "stats", "--store", &missing]);
    assert_eq!(r.code, 2, "{r:?}");
    let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{r:?}");
    let v: Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!(v["level"], "ERROR", "{v}");
    assert!(
        v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no database")),
        "{v}"
    );
    // Text stays text.
    let r = outbox(&["stats", "--store", &missing]);
    assert!(r.stderr.starts_with("error: "), "{r:?}");
}

#[test]
fn a_bad_namespace_is_bad_input_on_redis_as_on_postgres() {
    let redis =
        std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let pg = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    for store in [redis.as_str(), pg.as_str()] {
        for ns in ["a{b}", "x}y", "{z"] {
            let r = outbox(&["stats", "--store", store, "--namespace", ns]);
            assert_eq!(r.code, 2, "{store} {ns}: {r:?}");
            assert!(r.stderr.contains("namespace"), "{store} {ns}: {r:?}");
        }
    }
}

#[test]
fn allow_private_never_admits_a_metadata_address() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    for url in [
        "https://169.254.170.2/v2/credentials",
        "http://169.254.170.2/v2/credentials",
        "https://169.254.169.254/latest",
        "https://169.254.169.253/",
        "https://100.100.100.200/latest",
        "https://[fd00:ec2::254]/latest",
    ] {
        let r = outbox(&[
            "endpoints",
            "add",
            "--store",
            s,
            "--url",
            url,
            "--filter",
            "*",
            "--allow-private",
            "--allow-http",
        ]);
        assert_eq!(r.code, 2, "{url}: {r:?}");
        assert!(r.stderr.contains("metadata"), "{url}: {r:?}");
    }
    let list: Value =
        serde_json::from_str(&outbox(&["endpoints", "list", "--store", s, "--json"]).ok()).unwrap();
    assert_eq!(
        list["endpoints"].as_array().map(Vec::len),
        Some(0),
        "{list}"
    );
}

#[test]
fn endpoints_take_a_rate_limit_and_show_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let add = |extra: &[&str]| {
        let mut args = vec![
            "endpoints",
            "add",
            "--store",
            s,
            "--url",
            "http://127.0.0.1:9/hook",
            "--allow-http",
            "--allow-private",
            "--json",
        ];
        args.extend_from_slice(extra);
        outbox(&args)
    };
    let refused = add(&["--rate-limit", "0"]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("rate_limit"), "{refused:?}");
    let list: Value =
        serde_json::from_str(&outbox(&["endpoints", "list", "--store", s, "--json"]).ok()).unwrap();
    assert_eq!(
        list["endpoints"].as_array().map(Vec::len),
        Some(0),
        "{list}"
    );

    let v: Value = serde_json::from_str(&add(&["--rate-limit", "5"]).ok()).unwrap();
    assert_eq!(v["rate_limit"], 5, "{v}");
    let ep = v["id"].as_str().unwrap().to_owned();
    let show = |json: bool| {
        let mut args = vec!["endpoints", "show", "--store", s, ep.as_str()];
        if json {
            args.push("--json");
        }
        outbox(&args).ok()
    };
    assert!(
        show(false).contains("rate limit:   5 per second"),
        "{}",
        show(false)
    );
    let update = |value: &str| {
        outbox(&[
            "endpoints",
            "update",
            "--store",
            s,
            &ep,
            "--rate-limit",
            value,
        ])
    };
    update("7").ok();
    let v: Value = serde_json::from_str(&show(true)).unwrap();
    assert_eq!(v["rate_limit"], 7, "{v}");
    for bad in ["0", "fast", "-1"] {
        let r = update(bad);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
        let v: Value = serde_json::from_str(&show(true)).unwrap();
        assert_eq!(v["rate_limit"], 7, "{bad} changed nothing: {v}");
    }
    update("none").ok();
    let v: Value = serde_json::from_str(&show(true)).unwrap();
    assert_eq!(v["rate_limit"], Value::Null, "{v}");
    assert!(
        show(false).contains("rate limit:   none"),
        "{}",
        show(false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_runs_on_a_redis_cluster_with_shards() {
    if !crate::cluster::available() {
        return outboxkit_testing::conformance::backend_unavailable::<()>(
            "redis cluster",
            "redis-server is not installed",
        )
        .unwrap_or(());
    }
    let cluster = crate::cluster::cluster("main");
    let url = cluster.cluster_url();
    let mut b = [0u8; 6];
    outboxkit_core::Entropy::fill(&OsEntropy, &mut b);
    let ns = format!(
        "cli_cluster_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    );
    let at = |args: &[&str]| {
        let mut full = args.to_vec();
        full.extend_from_slice(&["--store", &url, "--namespace", &ns, "--shards", "3"]);
        outbox(&full)
    };
    let migrated = at(&["migrate"]).ok();
    assert!(migrated.contains("redis outbox ready"), "{migrated}");
    let receiver = outboxkit_testing::WebhookReceiver::start().await.unwrap();
    let hook = receiver.url_for("/hook");
    at(&[
        "endpoints",
        "add",
        "--url",
        &hook,
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    for k in ["a", "b", "c", "d", "e", "f"] {
        at(&[
            "enqueue",
            "--topic",
            "order.created",
            "--data",
            "{}",
            "--ordering-key",
            k,
        ])
        .ok();
    }
    let stats: Value = serde_json::from_str(&at(&["stats", "--json"]).ok()).unwrap();
    assert_eq!(stats["pending"], 6, "{stats}");
    let report: Value = serde_json::from_str(
        &at(&[
            "relay",
            "--until-idle",
            "--json",
            "--allow-http",
            "--allow-private",
        ])
        .ok(),
    )
    .unwrap();
    assert_eq!(report["succeeded"], 6, "{report}");
    assert_eq!(receiver.requests().len(), 6);
    let stats: Value = serde_json::from_str(&at(&["stats", "--json"]).ok()).unwrap();
    assert_eq!(stats["succeeded"], 6, "{stats}");

    // Bad shard counts are bad input, and only Redis has shards.
    for bad in ["0", "65"] {
        let r = outbox(&[
            "stats",
            "--store",
            &url,
            "--namespace",
            &ns,
            "--shards",
            bad,
        ]);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &sqlite]).ok();
    let r = outbox(&["stats", "--store", &sqlite, "--shards", "2"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("shards"), "{r:?}");
}

fn run_with_key(key: Option<&str>, args: &[&str]) -> crate::Run {
    let mut c = outbox_cmd();
    match key {
        Some(k) => c.env("OUTBOX_VAULT_KEY", k),
        None => c.env_remove("OUTBOX_VAULT_KEY"),
    };
    let o = c.args(args).output().unwrap();
    crate::Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[test]
fn a_relay_needs_a_vault_key_only_for_endpoints_and_refuses_a_wrong_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let relay = ["relay", "--store", s, "--until-idle", "--json"];
    // No endpoint to sign for: no key needed.
    outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", "{}"]).ok();
    let r = run_with_key(None, &relay);
    assert_eq!(r.code, 0, "{r:?}");

    outbox(&[
        "endpoints",
        "add",
        "--store",
        s,
        "--url",
        "http://127.0.0.1:9/hook",
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", "{}"]).ok();
    // An endpoint and no key: the key is demanded.
    let r = run_with_key(None, &relay);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("OUTBOX_VAULT_KEY"), "{r:?}");
    // A wrong key: a configuration error at start-up, nothing claimed or parked.
    let wrong = "00".repeat(32);
    let r = run_with_key(Some(&wrong), &relay);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("vault key opens none"), "{r:?}");
    assert!(!r.stderr.contains(&wrong), "{r:?}");
    let stats: Value =
        serde_json::from_str(&outbox(&["stats", "--store", s, "--json"]).ok()).unwrap();
    assert_eq!(
        (&stats["pending"], &stats["held"], &stats["dead"]),
        (&Value::from(1), &Value::from(0), &Value::from(0)),
        "{stats}"
    );
}

#[test]
fn the_demo_counts_its_warnings_instead_of_printing_them() {
    let o = outbox_cmd()
        .env_remove("OUTBOX_LOG")
        .env_remove("RUST_LOG")
        .args(["demo", "--events", "60", "--quiet"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("WARN"), "warnings printed: {stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("warnings logged while it ran: "))
        .unwrap_or_else(|| panic!("no warnings count: {stdout}"));
    let n: u64 = line["warnings logged while it ran: ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n > 0, "the failing receiver warns: {line}");
}
