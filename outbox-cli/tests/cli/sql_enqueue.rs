//! Enqueue from other languages: `outbox migrate` installs `<namespace>.enqueue(…)`, and
//! psql and Python (psycopg) call it inside their own transactions. What they roll back is
//! never delivered; what they commit `outbox relay` delivers, signed.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{OsEntropy, Store, SystemClock, TenantId};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_testing::WebhookReceiver;

use crate::{namespace, outbox_cmd, postgres_pool, signed_endpoint, Run};

/// The Python a service would write: psycopg, its own transaction, the function called with
/// plain parameters (a `str` payload is sent untyped and read as `json`).
const PYTHON: &str = r#"
import json, sys
import psycopg

url, ns = sys.argv[1], sys.argv[2]
call = f'SELECT message_id, deliveries, duplicate FROM "{ns}".enqueue(%s, %s, %s, idempotency_key => %s)'
with psycopg.connect(url) as conn:
    with conn.transaction():
        conn.execute("CREATE TABLE IF NOT EXISTS \"" + ns + "\".orders (id int PRIMARY KEY)")
    # Rolled back: the order and its event go together.
    try:
        with conn.transaction():
            conn.execute("INSERT INTO \"" + ns + "\".orders VALUES (1)")
            conn.execute(call, ("default", "order.created", json.dumps({"via": "python-rolled-back"}), "py-1"))
            raise RuntimeError("the order failed")
    except RuntimeError:
        pass
    with conn.transaction():
        conn.execute("INSERT INTO \"" + ns + "\".orders VALUES (2)")
        row = conn.execute(call, ("default", "order.created", json.dumps({"via": "python-committed"}), "py-2")).fetchone()
    again = conn.execute(call, ("default", "order.created", json.dumps({"via": "python-again"}), "py-2")).fetchone()
    print(json.dumps({"id": str(row[0]), "deliveries": row[1], "duplicate": row[2],
                      "again": str(again[0]), "again_duplicate": again[2]}))
"#;

fn psql(url: &str, sql: &str) -> Run {
    Run::from_output(
        std::process::Command::new("psql")
            .args([
                url,
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .output(),
        "psql",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_and_python_enqueue_in_their_transactions_and_the_relay_delivers_signed() {
    let Some((url, pool)) = postgres_pool(2).await else {
        return;
    };
    let python = std::process::Command::new("python3")
        .args(["-c", "import psycopg"])
        .output();
    if !python.as_ref().is_ok_and(|o| o.status.success()) {
        return outboxkit_testing::conformance::backend_unavailable::<()>(
            "python3 with psycopg (pip install 'psycopg[binary]')",
            format!("{python:?}"),
        )
        .unwrap_or(());
    }
    let ns = namespace("cli_sqlfn");
    let (url2, ns2, pool2) = (url.clone(), ns.clone(), pool.clone());
    let result = tokio::spawn(async move {
        let (url, ns, pool) = (url2, ns2, pool2);
        outbox_cmd()
            .args(["migrate", "--store", &url, "--namespace", &ns])
            .output()
            .map(Run::from)
            .unwrap()
            .ok();
        let store = PostgresStore::new(
            pool.clone(),
            PostgresConfig::new(ns.clone()),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .unwrap();
        let receiver = WebhookReceiver::start().await.unwrap();
        let shared: Arc<dyn Store> = Arc::new(store.clone());
        signed_endpoint(shared.clone(), &TenantId::default(), &receiver, "order.*").await;

        // psql: one transaction rolled back, one committed.
        let call = |via: &str| {
            format!(
                "SELECT deliveries FROM \"{ns}\".enqueue('default', 'order.created', \
                 '{{\"via\": \"{via}\"}}', ordering_key => 'order:1')"
            )
        };
        let out = psql(
            &url,
            &format!("BEGIN; {}; ROLLBACK;", call("psql-rolled-back")),
        )
        .ok();
        assert_eq!(out.trim(), "1", "one delivery, then rolled back");
        assert_eq!(
            psql(&url, &format!("BEGIN; {}; COMMIT;", call("psql-committed")))
                .ok()
                .trim(),
            "1"
        );
        // Bad input: a clear error, nothing written.
        let bad = psql(
            &url,
            &format!("SELECT * FROM \"{ns}\".enqueue('default', 'Order', '{{}}')"),
        );
        assert_ne!(bad.code, 0);
        assert!(
            bad.stderr
                .contains("invalid input: topic: each part must start with a lowercase letter"),
            "{}",
            bad.stderr
        );

        // Python, psycopg.
        let py = Run::from_output(
            std::process::Command::new("python3")
                .args(["-c", PYTHON, &url, &ns])
                .output(),
            "python3",
        )
        .ok();
        let py: serde_json::Value = serde_json::from_str(py.trim()).unwrap();
        assert_eq!(py["deliveries"], 1, "{py}");
        assert_eq!(py["duplicate"], false, "{py}");
        assert_eq!(py["again"], py["id"], "the key's message: {py}");
        assert_eq!(py["again_duplicate"], true, "{py}");

        let mut child = outbox_cmd()
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
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let delivered = receiver.wait_for(2, Duration::from_secs(60)).await;
        let stats = loop {
            // Wait for the relay to record both outcomes (and anything else it finds).
            let s = shared.stats().await.unwrap();
            if s.succeeded >= 2 || !delivered {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(delivered, "the relay delivered: {stderr}");
        let requests = receiver.requests();
        let bodies: Vec<String> = requests
            .iter()
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .collect();
        assert_eq!(bodies.len(), 2, "{bodies:?}");
        assert!(requests.iter().all(|r| r.verified()), "signed: {bodies:?}");
        for want in ["psql-committed", "python-committed"] {
            assert!(
                bodies.iter().any(|b| b.contains(want)),
                "{want}: {bodies:?}"
            );
        }
        assert!(
            !bodies
                .iter()
                .any(|b| b.contains("rolled-back") || b.contains("again")),
            "{bodies:?}"
        );
        assert_eq!((stats.succeeded, stats.total()), (2, 2), "{stats:?}");
        let orders: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM \"{ns}\".orders"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(orders, 1, "the rolled-back order is gone with its event");
    });
    let outcome = result.await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{ns}\" CASCADE"
    )))
    .execute(&pool)
    .await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}
