//! Every operator command against a SQLite store.

use std::time::Duration;

use outboxkit_testing::WebhookReceiver;

use crate::{id_after, outbox, sqlite_url};

// The receiver is served by the runtime while this test blocks on child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_commands_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    let receiver = WebhookReceiver::start().await.unwrap();
    let url = receiver.url();

    let out = outbox(&["migrate", "--store", s]).ok();
    assert!(out.contains("ready"), "{out}");

    let out = outbox(&[
        "endpoints",
        "add",
        "--store",
        s,
        "--url",
        &url,
        "--description",
        "crm",
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    let ep = id_after(&out, "created endpoint ");
    let secret = id_after(&out, "(shown once): ");
    assert!(secret.starts_with("whsec_"));
    receiver.set_secrets(vec![outboxkit_core::WebhookSecret::parse(&secret).unwrap()]);

    assert!(outbox(&["endpoints", "list", "--store", s])
        .ok()
        .contains(&ep));
    let shown = outbox(&["endpoints", "show", "--store", s, &ep]).ok();
    assert!(shown.contains("active") && shown.contains("crm"), "{shown}");
    assert!(
        !shown.contains(&secret),
        "a secret is shown once, at creation"
    );
    outbox(&[
        "endpoints",
        "update",
        "--store",
        s,
        &ep,
        "--description",
        "crm v2",
        "--filter",
        "order.*",
    ])
    .ok();
    assert!(outbox(&["endpoints", "show", "--store", s, &ep])
        .ok()
        .contains("crm v2"));
    assert!(outbox(&["endpoints", "pause", "--store", s, &ep])
        .ok()
        .contains("paused"));
    assert!(outbox(&["endpoints", "resume", "--store", s, &ep])
        .ok()
        .contains("active"));

    // One signed test event now, verified by the receiver.
    let out = outbox(&[
        "endpoints",
        "test",
        "--store",
        s,
        &ep,
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    assert!(out.contains("answered 200"), "{out}");
    assert!(receiver.wait_for(1, Duration::from_secs(5)).await);
    assert!(receiver.requests()[0].verified());

    let out = outbox(&[
        "enqueue",
        "--store",
        s,
        "--topic",
        "order.created",
        "--data",
        r#"{"id":1}"#,
        "--key",
        "k1",
    ])
    .ok();
    assert!(out.contains("with 1 deliveries"), "{out}");
    let msg = id_after(&out, "enqueued message ");
    let dup = outbox(&[
        "enqueue",
        "--store",
        s,
        "--topic",
        "order.created",
        "--data",
        r#"{"id":1}"#,
        "--key",
        "k1",
    ])
    .ok();
    assert!(
        dup.contains(&format!("duplicate of message {msg}")),
        "{dup}"
    );

    let json = outbox(&["deliveries", "list", "--store", s, "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let d = &v["deliveries"][0];
    assert_eq!(d["status"], "pending");
    let did = d["id"].as_str().unwrap().to_owned();
    let table = outbox(&[
        "deliveries",
        "list",
        "--store",
        s,
        "--status",
        "pending",
        "--endpoint",
        &ep,
        "--topic",
        "order.created",
        "--since",
        "1h",
    ])
    .ok();
    assert!(table.contains(&did), "{table}");
    assert!(
        !outbox(&["deliveries", "list", "--store", s, "--status", "dead"])
            .ok()
            .contains(&did)
    );

    assert!(outbox(&["retry", "--store", s, &did])
        .ok()
        .contains("due now"));
    let r = outbox(&["retry", "--reset", "--store", s, &did]);
    assert_eq!(r.code, 1, "only held deliveries reset: {r:?}");
    assert!(r.stderr.contains("held"), "{r:?}");
    let r = outbox(&["replay", "--store", s, &did]);
    assert_eq!(r.code, 1, "only dead deliveries replay: {r:?}");
    assert!(outbox(&["release-held", "--store", s, "--endpoint", &ep])
        .ok()
        .contains("released 0"));
    let stats = outbox(&["stats", "--store", s]).ok();
    assert!(stats.contains("pending     1"), "{stats}");
    let stats: serde_json::Value =
        serde_json::from_str(&outbox(&["stats", "--store", s, "--json"]).ok()).unwrap();
    assert_eq!(stats["pending"], 1);
    assert!(outbox(&["deliveries", "show", "--store", s, &did])
        .ok()
        .contains("attempts:"));
    assert!(outbox(&["purge", "--store", s, "--older-than", "30d"])
        .ok()
        .contains("purged 0 deliveries"));

    let rotated = outbox(&["endpoints", "rotate-secret", "--store", s, &ep]).ok();
    assert!(rotated.contains("whsec_"));
    assert!(
        outbox(&["endpoints", "rotate-secret", "--store", s, &ep, "--finish"])
            .ok()
            .contains("finished")
    );
    outbox(&["endpoints", "delete", "--store", s, &ep]).ok();
    assert_eq!(outbox(&["endpoints", "show", "--store", s, &ep]).code, 1);

    // Another tenant sees nothing of this one.
    assert!(
        !outbox(&["deliveries", "list", "--store", s, "--tenant", "other"])
            .ok()
            .contains(&did)
    );
    assert!(outbox(&["--help"]).ok().contains("relay"));
}
