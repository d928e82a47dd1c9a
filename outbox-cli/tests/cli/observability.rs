//! `outbox relay --metrics-addr` on PostgreSQL: `/healthz`, `/readyz` and `/metrics`, whose
//! figures move as deliveries complete; one message's `traceparent` followed from enqueue to
//! the receiver's request headers (`--forward-traceparent`); the connection and schema
//! errors that name their cause; the sizing check and the new flags in `--help`.

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{AeadVault, NewMessage, OsEntropy, Store, SystemClock, TenantId, Traceparent};
use outboxkit_dispatch::{EndpointAdmin, NewEndpoint};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_testing::WebhookReceiver;

use crate::{namespace, outbox, outbox_cmd, VAULT_KEY};

const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn pg_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// `GET path` over HTTP/1.0: the status code and the body (`None` while nothing listens).
pub(crate) async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: relay\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Some((status, body))
}

/// The value of the sample `name` (with its labels, exactly as rendered), or 0.
pub(crate) fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (n, v) = l.rsplit_once(' ')?;
            (n == name).then(|| v.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// The families of a Prometheus text exposition, each checked to have a non-empty `# HELP`
/// and a `# TYPE` line before its samples, every sample to belong to a described family,
/// and a counter's name to end in `_total` (so no counter reads like a gauge).
pub(crate) fn described_families(text: &str) -> Vec<String> {
    use std::collections::BTreeMap;
    let mut help: BTreeMap<String, String> = BTreeMap::new();
    let mut kind: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(name.to_owned(), text.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest.split_once(' ').expect("a TYPE line names a type");
            assert!(
                help.contains_key(name),
                "HELP comes before TYPE for {name}:\n{text}"
            );
            kind.insert(name.to_owned(), t.trim().to_owned());
        } else if !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap_or(line);
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|base| {
                    kind.get(*base)
                        .is_some_and(|t| t == "histogram" || t == "summary")
                })
                .unwrap_or(name);
            assert!(
                kind.contains_key(family),
                "sample {name} has no TYPE:\n{text}"
            );
        }
    }
    for (name, t) in &kind {
        let h = help.get(name).map(String::as_str).unwrap_or("");
        assert!(!h.is_empty(), "{name} has an empty HELP:\n{text}");
        assert!(
            ["counter", "gauge", "histogram"].contains(&t.as_str()),
            "{name}: {t}"
        );
        assert_eq!(t == "counter", name.ends_with("_total"), "{name} is a {t}");
    }
    kind.into_keys().collect()
}

/// `promtool check metrics` on the exposition when promtool is installed (CI installs it
/// with `apt-get install -y prometheus`); says so when it is not.
pub(crate) fn promtool_check(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("promtool is not installed: `promtool check metrics` not run (the exposition was checked by this test's own parser)");
        return;
    };
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("metrics to promtool");
    let out = child.wait_with_output().expect("promtool's verdict");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stop(mut child: Child) -> String {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    for _ in 0..200 {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("the relay's output");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_metrics_move_as_deliveries_complete_and_the_trace_reaches_the_receiver() {
    let url = pg_url();
    let config = PostgresConfig::default();
    let pool = match config.connect_pool(&url).await {
        Ok(p) => p,
        Err(e) => {
            return outboxkit_testing::conformance::backend_unavailable::<()>("postgres", e)
                .unwrap_or(())
        }
    };
    let ns = namespace("cli_metrics");
    let store = PostgresStore::new(
        pool.clone(),
        PostgresConfig::new(ns.clone()),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .unwrap();
    store.migrate().await.unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let receiver = WebhookReceiver::start().await.unwrap();
    let vault = Arc::new(AeadVault::from_hex(VAULT_KEY, Arc::new(OsEntropy)).unwrap());
    let admin = EndpointAdmin::new(
        shared.clone(),
        vault,
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .with_url_policy(Arc::new(outboxkit_core::AnyUrl));
    let (_, secret) = admin
        .create(
            &TenantId::default(),
            NewEndpoint {
                url: receiver.url(),
                filter: "*".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    receiver.set_secrets(vec![secret]);

    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let child = outbox_cmd()
        .args([
            "relay",
            "--store",
            &url,
            "--namespace",
            &ns,
            "--allow-http",
            "--allow-private",
            "--poll-interval",
            "100ms",
            "--metrics-addr",
            &addr,
            "--forward-traceparent",
            "--max-connections",
            "6",
            "--concurrency",
            "32",
        ])
        .env("OUTBOX_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // On a task, so that a failed assertion still stops the relay below.
    let result = tokio::spawn(async move {
        let mut healthy = None;
        for _ in 0..200 {
            healthy = get(&addr, "/healthz").await;
            if healthy.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(healthy.map(|h| h.0), Some(200), "/healthz answers");
        let (code, body) = get(&addr, "/readyz").await.expect("/readyz");
        assert_eq!((code, body.as_str()), (200, "ready\n"));
        let (code, before) = get(&addr, "/metrics").await.expect("/metrics");
        assert_eq!(code, 200);
        let succeeded = r#"outbox_attempts_total{channel="webhook",outcome="succeeded"}"#;
        assert_eq!(sample(&before, succeeded), 0.0, "{before}");
        assert_eq!(
            sample(&before, r#"outbox_unfinished_deliveries{status="pending"}"#),
            0.0
        );
        // The queue gauges count unfinished work only (read without the finished history):
        // finished attempts are counted by `outbox_attempts_total`.
        assert!(
            !before.contains(r#"outbox_unfinished_deliveries{status="succeeded"}"#),
            "{before}"
        );

        let tp = Traceparent::parse(TP).unwrap();
        shared
            .enqueue(NewMessage::new("order.created", serde_json::json!({"i": 0})).traceparent(&tp))
            .await
            .unwrap();
        for i in 1..20 {
            shared
                .enqueue(NewMessage::new(
                    "order.created",
                    serde_json::json!({ "i": i }),
                ))
                .await
                .unwrap();
        }
        assert!(
            receiver.wait_for(20, Duration::from_secs(60)).await,
            "delivered"
        );
        // The completions are written after the requests: wait for the counter.
        let mut after = String::new();
        for _ in 0..100 {
            after = get(&addr, "/metrics").await.expect("/metrics").1;
            if sample(&after, succeeded) >= 20.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(sample(&after, succeeded), 20.0, "{after}");
        assert!(
            !after.contains(r#"outbox_unfinished_deliveries{status="succeeded"}"#),
            "{after}"
        );
        assert_eq!(
            sample(&after, r#"outbox_unfinished_deliveries{status="pending"}"#),
            0.0,
            "{after}"
        );
        assert!(sample(&after, "outbox_claimed_total") >= 20.0, "{after}");
        assert!(
            sample(
                &after,
                r#"outbox_attempt_duration_seconds_count{channel="webhook"}"#
            ) >= 20.0,
            "{after}"
        );
        assert!(
            sample(&after, "outbox_claim_duration_seconds_count") >= 1.0,
            "{after}"
        );
        assert!(
            sample(&after, "outbox_completion_duration_seconds_count") >= 1.0,
            "{after}"
        );
        assert!(after.contains("outbox_oldest_due_age_seconds"), "{after}");
        let build = format!(
            "outbox_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(sample(&after, &build), 1.0, "{after}");
        let families = described_families(&after);
        for family in [
            "outbox_attempts_total",
            "outbox_attempt_duration_seconds",
            "outbox_claims_total",
            "outbox_claimed_total",
            "outbox_claim_duration_seconds",
            "outbox_completion_duration_seconds",
            "outbox_unfinished_deliveries",
            "outbox_oldest_due_age_seconds",
            "outbox_build_info",
        ] {
            assert!(families.contains(&family.to_owned()), "{family} in {after}");
        }
        promtool_check(&after);
        let traced: Vec<_> = receiver
            .requests()
            .iter()
            .filter_map(|r| r.header("traceparent").map(str::to_owned))
            .collect();
        assert_eq!(
            traced,
            vec![TP.to_owned()],
            "exactly the traced message carries it"
        );
    })
    .await;
    let stderr = stop(child);
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "drop schema if exists {ns} cascade"
    )))
    .execute(&pool)
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
    assert!(stderr.contains("serving /metrics"), "{stderr}");
    assert!(
        !stderr.contains("claimed a batch"),
        "per-batch lines are DEBUG: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "no ANSI codes off a terminal: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_schema_and_unreachable_servers_say_so() {
    let url = pg_url();
    if let Err(e) = PostgresConfig::default().connect_pool(&url).await {
        return outboxkit_testing::conformance::backend_unavailable::<()>("postgres", e)
            .unwrap_or(());
    }
    let ns = namespace("cli_unmigrated");
    let run = outbox(&["stats", "--store", &url, "--namespace", &ns]);
    assert_ne!(run.code, 0);
    assert!(run.stderr.contains("outbox migrate"), "{}", run.stderr);
    let run = outbox(&["stats", "--store", "postgres://postgres@127.0.0.1:1/test"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("cannot reach postgres (connection refused)"),
        "{}",
        run.stderr
    );
    let run = outbox(&[
        "stats",
        "--store",
        "redis://127.0.0.1:1",
        "--connect-timeout",
        "1s",
    ]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("cannot reach redis (connection refused)"),
        "{}",
        run.stderr
    );
    // A server that accepts and never answers: the connect timeout applies.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    for store in [
        format!("redis://{silent_addr}"),
        format!("postgres://postgres@{silent_addr}/test"),
    ] {
        let started = outboxkit_core::Stopwatch::start();
        let run = outbox(&["stats", "--store", &store, "--connect-timeout", "500ms"]);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the connect timeout applies"
        );
        assert!(
            run.stderr.contains("did not answer within 500 ms")
                || run.stderr.contains("(timed out)"),
            "{}",
            run.stderr
        );
    }
    drop(silent);
    let run = outbox(&["relay", "--store", &url, "--max-connections", "1"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("--max-connections: must be at least 2"),
        "{}",
        run.stderr
    );
}

#[test]
fn relay_help_shows_the_production_flags() {
    let help = outbox(&["relay", "--help"]).ok();
    for flag in [
        "--metrics-addr",
        "--max-connections",
        "--log-format",
        "--connect-timeout",
        "--forward-traceparent",
        "OUTBOX_LOG",
        "DEPLOYMENT.md",
    ] {
        assert!(help.contains(flag), "{flag} in relay --help:\n{help}");
    }
}
