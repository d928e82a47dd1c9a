//! The gaps of issue 17 on SQLite: `--json` everywhere, `enqueue --data @file|-`, hidden URL
//! secrets, consumers, completions, `RUST_LOG`.

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;

use outboxkit_core::{Consumer, ConsumerName, EndpointStore, OsEntropy, SystemClock, TopicFilter};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::WebhookReceiver;
use serde_json::Value;

use crate::{outbox, outbox_cmd, sqlite_url};

/// Run with `--json`, check it is one JSON document with no `{secs, nanos}` in it.
fn json(args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.push("--json");
    let out = outbox(&full).ok();
    assert!(
        !out.contains("nanos"),
        "{full:?}: a duration as {{secs, nanos}}: {out}"
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{full:?}: {e}: {out}"))
}

fn is_rfc3339(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 24 && s.ends_with('Z') && s.as_bytes()[10] == b'T')
}

// The receiver is served by the runtime while this test blocks on child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_printing_command_speaks_json() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    let receiver = WebhookReceiver::start().await.unwrap();
    let url = receiver.url_for("/hook?token=s3cr3t");

    assert_eq!(json(&["migrate", "--store", s])["ready"], true);
    assert_eq!(json(&["keygen"])["key"].as_str().unwrap().len(), 64);
    let added = json(&[
        "endpoints",
        "add",
        "--store",
        s,
        "--url",
        &url,
        "--allow-http",
        "--allow-private",
    ]);
    let ep = added["id"].as_str().unwrap().to_owned();
    assert!(added["secret"].as_str().unwrap().starts_with("whsec_"));
    receiver.set_secrets(vec![outboxkit_core::WebhookSecret::parse(
        added["secret"].as_str().unwrap(),
    )
    .unwrap()]);
    let listed = json(&["endpoints", "list", "--store", s]);
    assert_eq!(listed["endpoints"][0]["id"], ep.as_str());
    assert!(
        is_rfc3339(&listed["endpoints"][0]["created_at"]),
        "{listed}"
    );
    let shown = json(&["endpoints", "show", "--store", s, &ep]);
    assert_eq!(shown["status"], "active");
    assert_eq!(
        json(&[
            "endpoints",
            "update",
            "--store",
            s,
            &ep,
            "--description",
            "crm"
        ])["description"],
        "crm"
    );
    assert_eq!(
        json(&["endpoints", "pause", "--store", s, &ep])["status"],
        "paused"
    );
    assert_eq!(
        json(&["endpoints", "resume", "--store", s, &ep])["status"],
        "active"
    );
    let tested = json(&[
        "endpoints",
        "test",
        "--store",
        s,
        &ep,
        "--allow-http",
        "--allow-private",
    ]);
    assert_eq!(
        (&tested["answered"], &tested["status_code"]),
        (&Value::from(true), &Value::from(200))
    );
    let rotated = json(&["endpoints", "rotate-secret", "--store", s, &ep]);
    let secret = rotated["secret"].as_str().unwrap();
    receiver.set_secrets(vec![outboxkit_core::WebhookSecret::parse(secret).unwrap()]);
    assert_eq!(
        json(&["endpoints", "rotate-secret", "--store", s, &ep, "--finish"])
            ["rotation_in_progress"],
        false
    );

    let enq = json(&[
        "enqueue",
        "--store",
        s,
        "--topic",
        "order.created",
        "--data",
        r#"{"id":1}"#,
    ]);
    assert_eq!(
        (&enq["deliveries"], &enq["duplicate"]),
        (&Value::from(1), &Value::from(false))
    );
    let list = json(&["deliveries", "list", "--store", s]);
    let d = &list["deliveries"][0];
    let did = d["id"].as_str().unwrap().to_owned();
    for t in ["next_attempt_at", "created_at", "updated_at"] {
        assert!(is_rfc3339(&d[t]), "{t}: {d}");
    }
    assert_eq!(d["destination"]["kind"], "webhook");
    assert_eq!(d["destination"]["target"], ep.as_str());
    let shown = json(&["deliveries", "show", "--store", s, &did]);
    assert_eq!(shown["delivery"]["id"], did.as_str());
    assert!(shown["attempts"].is_array());
    assert_eq!(json(&["retry", "--store", s, &did])["changed"], 1);
    let dry = json(&["replay", "--store", s, &did, "--dry-run"]);
    assert_eq!(
        (&dry["matched"], &dry["would_change"]),
        (&Value::from(1), &Value::from(0))
    );
    assert_eq!(
        json(&["release-held", "--store", s, "--endpoint", &ep])["changed"],
        0
    );
    let report = json(&[
        "relay",
        "--store",
        s,
        "--until-idle",
        "--allow-http",
        "--allow-private",
    ]);
    assert_eq!(report["succeeded"], 1, "{report}");
    assert!(report["run_time_ms"].is_u64(), "{report}");
    assert!(receiver.requests().iter().all(|r| r.verified()));
    let stats = json(&["stats", "--store", s]);
    assert_eq!(stats["succeeded"], 1, "{stats}");
    let shown = json(&["deliveries", "show", "--store", s, &did]);
    // Every column of the attempts table has a name (issue 31: the probe column had none).
    let text = outbox(&["deliveries", "show", "--store", s, &did]).ok();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("outcome") && l.contains("excerpt"))
        .unwrap_or_else(|| panic!("no attempts header: {text}"));
    let names: Vec<&str> = lines[at].split_whitespace().collect();
    let columns = lines[at + 1].split_whitespace().count();
    assert_eq!(names.len(), columns, "an unnamed column:\n{text}");
    assert!(names.contains(&"probe"), "{text}");
    // The JSON of an endpoint carries the last delivery the text shows, and names its
    // circuit for what it is: the state a relay starting now adopts (issue 31).
    let shown_ep = json(&["endpoints", "show", "--store", s, &ep]);
    let listed = json(&["endpoints", "list", "--store", s]);
    for v in [&shown_ep, &listed["endpoints"][0]] {
        assert_eq!(v["last_delivery"]["outcome"], "succeeded", "{v}");
        assert!(v["last_delivery"]["status_code"].is_u64(), "{v}");
        assert!(is_rfc3339(&v["last_delivery"]["at"]), "{v}");
        assert_eq!(v["circuit_at_start"], "closed", "{v}");
        assert!(v.get("circuit").is_none(), "{v}");
    }
    let text = outbox(&["endpoints", "show", "--store", s, &ep]).ok();
    assert!(text.contains("last delivery: succeeded"), "{text}");
    assert!(text.contains("circuit at start: closed"), "{text}");
    let a = &shown["attempts"][0];
    assert!(
        a["duration_ms"].is_u64() && is_rfc3339(&a["started_at"]),
        "{a}"
    );
    assert_eq!(
        json(&["purge", "--store", s, "--older-than", "30d"])["deliveries"],
        0
    );
    assert_eq!(
        json(&["consumers", "list", "--store", s])["consumers"],
        Value::Array(vec![])
    );
    assert_eq!(
        json(&["endpoints", "delete", "--store", s, &ep])["deleted"],
        ep.as_str()
    );
    let demo = json(&["demo", "--events", "20"]);
    assert_eq!(
        demo["figures"]["succeeded"].as_u64().unwrap() + demo["figures"]["dead"].as_u64().unwrap(),
        demo["figures"]["deliveries"].as_u64().unwrap(),
        "{demo}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_urls_hide_their_query_and_userinfo_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let receiver = WebhookReceiver::start().await.unwrap();
    let url = receiver.url_for("/hook?token=s3cr3t");
    let added = outbox(&[
        "endpoints",
        "add",
        "--store",
        s,
        "--url",
        &url,
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    let ep = crate::id_after(&added, "created endpoint ");
    for args in [
        vec!["endpoints", "list", "--store", s],
        vec!["endpoints", "list", "--store", s, "--json"],
        vec!["endpoints", "show", "--store", s, &ep],
        vec!["endpoints", "show", "--store", s, &ep, "--json"],
    ] {
        let out = outbox(&args).ok();
        assert!(!out.contains("s3cr3t"), "{args:?}: {out}");
        assert!(out.contains("/hook?…"), "{args:?}: {out}");
        let mut shown = args.clone();
        shown.push("--show-url");
        assert!(outbox(&shown).ok().contains("token=s3cr3t"), "{shown:?}");
    }
}

#[test]
fn enqueue_reads_data_from_a_file_or_stdin_up_to_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    // 200 KiB: far beyond what fits comfortably in an argument, within the 256 KiB limit.
    let big = format!(r#"{{"blob":"{}"}}"#, "x".repeat(200 * 1024));
    let file = dir.path().join("payload.json");
    std::fs::write(&file, &big).unwrap();
    let at = format!("@{}", file.display());
    let out = outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", &at]).ok();
    assert!(out.contains("enqueued message"), "{out}");

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
        .write_all(big.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["duplicate"], false);

    let too_big = dir.path().join("too-big.json");
    std::fs::write(
        &too_big,
        format!(r#"{{"blob":"{}"}}"#, "x".repeat(300 * 1024)),
    )
    .unwrap();
    let missing = format!("@{}", dir.path().join("missing.json").display());
    for data in [format!("@{}", too_big.display()), missing] {
        let r = outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", &data]);
        assert_eq!(r.code, 2, "{data}: {r:?}");
        assert!(r.stderr.contains("data"), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_are_listed_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let sqlite = SqliteStore::open(
        SqliteConfig::new(dir.path().join("outbox.sqlite")),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .unwrap();
    sqlite
        .put_consumer(&Consumer {
            name: ConsumerName::new("billing").unwrap(),
            filter: TopicFilter::parse("order.*").unwrap(),
            created_at: outboxkit_core::Clock::now(&SystemClock),
            status: outboxkit_core::ConsumerStatus::Active,
        })
        .await
        .unwrap();
    let table = outbox(&["consumers", "list", "--store", s]).ok();
    assert!(
        table.contains("billing") && table.contains("order.*"),
        "{table}"
    );
    let v = json(&["consumers", "list", "--store", s]);
    assert_eq!(v["consumers"][0]["name"], "billing");
    assert!(is_rfc3339(&v["consumers"][0]["created_at"]));
    assert!(outbox(&["consumers", "delete", "--store", s, "billing"])
        .ok()
        .contains("deleted consumer billing"));
    assert!(sqlite.list_consumers().await.unwrap().is_empty());
    assert_eq!(
        outbox(&["consumers", "delete", "--store", s, "Not A Name"]).code,
        2
    );
}

#[test]
fn completions_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = outbox(&["completions", shell]).ok();
        assert!(
            out.contains("outbox") && out.contains("release-held"),
            "{shell}"
        );
    }
    assert_eq!(outbox(&["completions", "tcsh"]).code, 2);
}

#[test]
fn rust_log_is_honoured_when_outbox_log_is_unset() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &store]).ok();
    let relay = |env: &[(&str, &str)]| {
        let mut c = outbox_cmd();
        c.env_remove("OUTBOX_LOG").env_remove("RUST_LOG");
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c
            .args(["relay", "--store", &store, "--until-idle"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(relay(&[]).contains("outbox relay started"));
    assert!(!relay(&[("RUST_LOG", "warn")]).contains("outbox relay started"));
    assert!(relay(&[("RUST_LOG", "warn"), ("OUTBOX_LOG", "info")]).contains("outbox relay started"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_egress_refusal_is_explained_once_with_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let receiver = WebhookReceiver::start().await.unwrap();
    let added = outbox(&[
        "endpoints",
        "add",
        "--store",
        s,
        "--url",
        &receiver.url(),
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    let ep = crate::id_after(&added, "created endpoint ");
    for i in 0..3 {
        let data = format!(r#"{{"i":{i}}}"#);
        outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", &data]).ok();
    }
    // The relay without --allow-private: the loopback receiver is refused.
    let out = outbox_cmd()
        .env_remove("OUTBOX_LOG")
        .env_remove("RUST_LOG")
        .args(["relay", "--store", s, "--until-idle", "--allow-http"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("--allow-private"))
        .collect();
    assert_eq!(warnings.len(), 1, "once per endpoint: {stderr}");
    assert!(warnings[0].contains(&ep), "names the endpoint: {stderr}");
    assert_eq!(receiver.count(), 0);

    let r = outbox(&["endpoints", "test", "--store", s, &ep, "--allow-http"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("--allow-private"), "{r:?}");
}
