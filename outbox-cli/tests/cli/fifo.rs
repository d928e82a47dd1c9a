//! Strict FIFO per endpoint through the real binary: `endpoints add|update --fifo/--no-fifo`,
//! shown by `show` and `list` (text and `--json`), and a relay with 16 deliveries at once
//! sending a FIFO endpoint's 50 messages of mixed ordering keys one at a time, in order.

use std::sync::Arc;

use outboxkit_core::{MessageStore, NewMessage, OsEntropy, SystemClock};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::{Reply, WebhookReceiver};
use serde_json::Value;

use crate::{outbox, sqlite_url};

fn json(args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.push("--json");
    let out = outbox(&full).ok();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{full:?}: {e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_endpoint_gets_its_deliveries_one_at_a_time_in_enqueue_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    let receiver = WebhookReceiver::start().await.unwrap();
    let url = receiver.url();
    let flags = ["--allow-http", "--allow-private"];
    assert_eq!(json(&["migrate", "--store", s])["ready"], true);
    let add = |fifo: bool| {
        let mut args = vec!["endpoints", "add", "--store", s, "--url", &url];
        args.extend(flags);
        if fifo {
            args.push("--fifo");
        }
        json(&args)
    };
    let added = add(true);
    assert_eq!(added["fifo"], true, "{added}");
    let ep = added["id"].as_str().unwrap().to_owned();
    let secret = outboxkit_core::WebhookSecret::parse(added["secret"].as_str().unwrap());
    receiver.set_secrets(vec![secret.unwrap()]);
    assert_eq!(
        json(&["endpoints", "show", "--store", s, &ep])["fifo"],
        true
    );
    let listed = json(&["endpoints", "list", "--store", s]);
    assert_eq!(listed["endpoints"][0]["fifo"], true, "{listed}");
    let text = outbox(&["endpoints", "show", "--store", s, &ep]).ok();
    assert!(text.contains("order:        fifo"), "{text}");
    let text = outbox(&["endpoints", "list", "--store", s]).ok();
    assert!(text.contains("order") && text.contains("fifo"), "{text}");

    let sqlite = SqliteStore::open(
        SqliteConfig::new(dir.path().join("outbox.sqlite")),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .unwrap();
    for i in 0..50 {
        let mut m = NewMessage::new("order.created", serde_json::json!({ "i": i }));
        if i % 3 != 0 {
            m = m.ordering_key(format!("order-{}", i % 7));
        }
        sqlite.enqueue(m).await.unwrap();
    }
    // Each answer waits a little: two deliveries at once would overlap at the receiver.
    receiver.script((0..50).map(|_| Reply::Delay(std::time::Duration::from_millis(5), 200)));
    let mut relay = vec!["relay", "--store", s, "--until-idle", "--concurrency", "16"];
    relay.extend(flags);
    let report = json(&relay);
    assert_eq!(report["succeeded"], 50, "{report}");
    let order: Vec<u64> = receiver
        .requests()
        .iter()
        .map(|r| {
            serde_json::from_slice::<Value>(&r.body).unwrap()["data"]["i"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(order, (0..50).collect::<Vec<u64>>(), "enqueue order");
    assert_eq!(receiver.max_in_flight(), 1, "one at a time");
    assert!(receiver.requests().iter().all(|r| r.verified()));

    let off = json(&["endpoints", "update", "--store", s, &ep, "--no-fifo"]);
    assert_eq!(off["fifo"], false, "{off}");
    let on = json(&["endpoints", "update", "--store", s, &ep, "--fifo"]);
    assert_eq!(on["fifo"], true, "{on}");
    let both = outbox(&[
        "endpoints",
        "update",
        "--store",
        s,
        &ep,
        "--fifo",
        "--no-fifo",
    ]);
    assert_eq!(both.code, 2, "{}", both.stderr);
    assert_eq!(add(false)["fifo"], false);
}
