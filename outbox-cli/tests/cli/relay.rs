//! `outbox relay` on PostgreSQL delivers to a receiver and stops cleanly on SIGTERM.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{AeadVault, NewMessage, OsEntropy, Store, SystemClock, TenantId};
use outboxkit_dispatch::{EndpointAdmin, NewEndpoint};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_testing::WebhookReceiver;

use crate::{outbox_cmd, VAULT_KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_on_postgres_delivers_and_stops_on_sigterm() {
    let url = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let pool = match sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await
    {
        Ok(p) => p,
        Err(e) => {
            return outboxkit_testing::conformance::backend_unavailable::<()>("postgres", e)
                .unwrap_or(())
        }
    };
    let mut b = [0u8; 6];
    outboxkit_core::Entropy::fill(&OsEntropy, &mut b);
    let ns = format!(
        "cli_relay_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    );
    let store = PostgresStore::new(
        pool.clone(),
        PostgresConfig::new(ns.clone()),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .unwrap();
    store.migrate().await.unwrap();

    let receiver = WebhookReceiver::start().await.unwrap();
    let vault = Arc::new(AeadVault::from_hex(VAULT_KEY, Arc::new(OsEntropy)).unwrap());
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let admin = EndpointAdmin::new(
        shared.clone(),
        vault,
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .with_url_policy(Arc::new(outboxkit_core::AnyUrl));
    let tenant = TenantId::default();
    let (_, secret) = admin
        .create(
            &tenant,
            NewEndpoint {
                url: receiver.url(),
                filter: "*".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    receiver.set_secrets(vec![secret]);
    for i in 0..50 {
        shared
            .enqueue(NewMessage::new(
                "order.created",
                serde_json::json!({ "i": i }),
            ))
            .await
            .unwrap();
    }

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
        // Per-batch lines are DEBUG.
        .env("OUTBOX_LOG", "info,outbox=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let delivered = receiver.wait_for(50, Duration::from_secs(60)).await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut status = None;
    for _ in 0..300 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let cleanup = async {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "drop schema if exists {ns} cascade"
        )))
        .execute(&pool)
        .await;
    };
    let stats = shared.stats().await.unwrap();
    cleanup.await;
    assert!(delivered, "the relay delivered everything: {stderr}");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "a clean exit on SIGTERM: {stderr}"
    );
    assert_eq!(
        (stats.succeeded, stats.pending, stats.processing),
        (50, 0, 0),
        "{stats:?}"
    );
    assert!(receiver.requests().iter().all(|r| r.verified()));
    assert!(
        stderr.contains("claimed a batch"),
        "a log line per batch: {stderr}"
    );
}
