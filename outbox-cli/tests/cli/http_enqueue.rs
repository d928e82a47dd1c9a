//! Enqueue over HTTP through the real binaries, as the README shows it: `outbox tokens create
//! --enqueue-only`, `outbox serve`, `curl -X POST …/messages` with an `Idempotency-Key`, and
//! `outbox relay` delivering the message signed, once. On PostgreSQL and on a SQLite file.

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{OsEntropy, Store, SystemClock, TenantId};
use outboxkit_testing::WebhookReceiver;

use crate::{
    free_port, namespace, outbox, outbox_cmd, postgres_pool, signed_endpoint, sqlite_url, Run,
};

/// `curl` a JSON body to `url` with `token` and extra headers: `(status, body)`.
fn curl(url: &str, token: &str, body: &str, headers: &[&str]) -> (u16, serde_json::Value) {
    let mut args = vec![
        "-sS".to_owned(),
        "-o".to_owned(),
        "-".to_owned(),
        "-w".to_owned(),
        "\n%{http_code}".to_owned(),
        "-H".to_owned(),
        format!("Authorization: Bearer {token}"),
        "-H".to_owned(),
        "Content-Type: application/json".to_owned(),
    ];
    for h in headers {
        args.extend(["-H".to_owned(), (*h).to_owned()]);
    }
    if !body.is_empty() {
        args.extend([
            "-X".to_owned(),
            "POST".to_owned(),
            "--data-binary".to_owned(),
            body.to_owned(),
        ]);
    }
    args.push(url.to_owned());
    let out = Run::from_output(
        std::process::Command::new("curl").args(&args).output(),
        "curl",
    )
    .ok();
    let (text, code) = out.rsplit_once('\n').expect("curl printed the status");
    (
        code.trim().parse().expect("a status code"),
        serde_json::from_str(text).unwrap_or(serde_json::Value::Null),
    )
}

/// Start `outbox serve` and wait until it listens.
fn serve(store: &str, ns: &str, port: u16) -> Child {
    let mut child = outbox_cmd()
        .args(["serve", "--store", store, "--namespace", ns, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return child;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("outbox serve did not listen");
}

fn stop(mut child: Child) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    for _ in 0..100 {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The whole path against `store` (the URL the binaries get) and `shared` (the same store,
/// opened by the test, to create the endpoint and read the outcome).
async fn enqueue_over_http(store: &str, ns: &str, shared: Arc<dyn Store>) {
    let acme = TenantId::new("acme").unwrap();
    let receiver = WebhookReceiver::start().await.unwrap();
    signed_endpoint(shared.clone(), &acme, &receiver, "*").await;

    // Both kinds at once is refused, and writes nothing.
    let loc = ["--store", store, "--namespace", ns];
    let both = outbox(
        &[
            &["tokens", "create"][..],
            &loc,
            &["--tenant", "acme", "--read-only", "--enqueue-only"],
        ]
        .concat(),
    );
    assert_eq!(both.code, 2, "{both:?}");
    let created = outbox(
        &[
            &["tokens", "create"][..],
            &loc,
            &[
                "--tenant",
                "acme",
                "--enqueue-only",
                "--label",
                "orders",
                "--json",
            ],
        ]
        .concat(),
    )
    .ok();
    let v: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(v["access"], "enqueue-only", "{v}");
    let token = v["token"].as_str().unwrap().to_owned();
    let listed = outbox(&[&["tokens", "list"][..], &loc].concat()).ok();
    assert!(listed.contains("enqueue-only"), "{listed}");
    assert_eq!(listed.matches("tenant:acme").count(), 1, "{listed}");

    let port = free_port();
    let server = serve(store, ns, port);
    let base = format!("http://127.0.0.1:{port}/v1/tenants/acme");
    let msg = format!("{base}/messages");
    let payload = r#"{"order": 42, "total": 12.50}"#;
    let body = format!(r#"{{"topic":"order.created","payload":{payload}}}"#);
    let key = "Idempotency-Key: order-42-created";
    let (code, first) = curl(&msg, &token, &body, &[key]);
    assert_eq!(code, 201, "{first}");
    assert_eq!(first["deliveries"], 1, "{first}");
    let (code, again) = curl(&msg, &token, &body, &[key]);
    assert_eq!(code, 200, "{again}");
    assert_eq!(again["message_id"], first["message_id"]);
    assert_eq!(again["duplicate"], true);
    // Bad input: 400 naming the field, nothing written.
    let (code, bad) = curl(&msg, &token, r#"{"topic":"Order","payload":{}}"#, &[]);
    assert_eq!(code, 400, "{bad}");
    assert_eq!(bad["field"], "topic", "{bad}");
    // The token enqueues and does nothing else.
    let (code, refused) = curl(&format!("{base}/stats"), &token, "", &[]);
    assert_eq!(code, 403, "{refused}");
    stop(server);

    let mut relay = outbox_cmd()
        .args([
            "relay",
            "--store",
            store,
            "--namespace",
            ns,
            "--allow-http",
            "--allow-private",
            "--poll-interval",
            "100ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let delivered = receiver.wait_for(1, Duration::from_secs(60)).await;
    let stats = loop {
        let s = shared.stats().await.unwrap();
        if s.succeeded >= 1 || !delivered {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = relay.kill();
    let out = relay.wait_with_output().unwrap();
    assert!(
        delivered,
        "the relay delivered: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1, "once");
    assert!(requests[0].verified(), "signed");
    let envelope: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(envelope["data"]["order"], 42, "{envelope}");
    assert_eq!((stats.succeeded, stats.total()), (1, 1), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_enqueue_through_serve_and_relay_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &url]).ok();
    let store = outboxkit_sqlite::SqliteStore::open(
        outboxkit_sqlite::SqliteConfig::new(dir.path().join("outbox.sqlite")),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .unwrap();
    enqueue_over_http(&url, "outbox", Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_enqueue_through_serve_and_relay_on_postgres() {
    let Some((url, pool)) = postgres_pool(2).await else {
        return;
    };
    let ns = namespace("cli_http");
    outbox(&["migrate", "--store", &url, "--namespace", &ns]).ok();
    let store = outboxkit_postgres::PostgresStore::new(
        pool.clone(),
        outboxkit_postgres::PostgresConfig::new(ns.clone()),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .unwrap();
    let (u, n) = (url.clone(), ns.clone());
    let outcome =
        tokio::spawn(async move { enqueue_over_http(&u, &n, Arc::new(store)).await }).await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{ns}\" CASCADE"
    )))
    .execute(&pool)
    .await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
