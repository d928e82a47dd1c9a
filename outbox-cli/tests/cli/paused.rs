//! `outbox consumers pause|resume` through the real binary: the status shows in `list` (text
//! and `--json`), an unknown or invalid name changes nothing, and a relay serving a paused
//! broker sink publishes nothing until the resume (nothing lost, no attempt spent).

use serde_json::Value;

use crate::broker::nats_stream;
use crate::{outbox, sqlite_url};

fn json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&outbox(&a).ok()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_broker_sink_gets_nothing_until_resumed() {
    let Some((nats, url, stream)) = nats_stream("cli-pause").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let subject = format!("{stream}.{{topic}}");
    let relay = || {
        outbox(&[
            "relay",
            "--store",
            s,
            "--until-idle",
            "--broker",
            &url,
            "--broker-subject",
            &subject,
        ])
        .ok()
    };
    // The first run registers the sink (consumer `broker`).
    relay();
    let listed = json(&["consumers", "list", "--store", s]);
    assert_eq!(listed["consumers"][0]["name"], "broker");
    assert_eq!(listed["consumers"][0]["status"], "active");

    // Unknown or invalid names change nothing.
    let ghost = outbox(&["consumers", "pause", "--store", s, "ghost"]);
    assert_eq!(ghost.code, 1, "{ghost:?}");
    assert!(ghost.stderr.contains("not found"), "{ghost:?}");
    assert_eq!(
        outbox(&["consumers", "resume", "--store", s, "Not A Name"]).code,
        2
    );
    assert_eq!(
        json(&["consumers", "list", "--store", s])["consumers"][0]["status"],
        "active"
    );

    let paused = json(&["consumers", "pause", "--store", s, "broker"]);
    assert_eq!(
        (&paused["name"], &paused["status"]),
        (&"broker".into(), &"paused".into())
    );
    let text = outbox(&["consumers", "list", "--store", s]).ok();
    assert!(text.contains("broker") && text.contains("paused"), "{text}");
    for n in 1..=2 {
        outbox(&[
            "enqueue",
            "--store",
            s,
            "--topic",
            "order.created",
            "--ordering-key",
            "o-1",
            "--data",
            &format!("{{\"n\":{n}}}"),
        ])
        .ok();
    }
    // A relay run (registering the sink again) keeps the pause and publishes nothing.
    let report = relay();
    assert!(report.contains("succeeded 0"), "{report}");
    let mut st = nats.jetstream().get_stream(&stream).await.unwrap();
    assert_eq!(st.info().await.unwrap().state.messages, 0);
    let held = json(&["deliveries", "list", "--store", s, "--status", "held"]);
    assert_eq!(held["deliveries"].as_array().unwrap().len(), 2, "{held}");
    assert_eq!(
        json(&["consumers", "list", "--store", s])["consumers"][0]["status"],
        "paused"
    );

    assert!(outbox(&["consumers", "resume", "--store", s, "broker"])
        .ok()
        .contains("resumed consumer broker"));
    let report = relay();
    assert!(report.contains("succeeded 2"), "{report}");
    assert_eq!(st.info().await.unwrap().state.messages, 2);
    let mut order = Vec::new();
    for seq in 1..=2 {
        let m = st.get_raw_message(seq).await.unwrap();
        let v: Value = serde_json::from_slice(&m.payload).unwrap();
        order.push(v["data"]["n"].as_u64().unwrap());
    }
    assert_eq!(order, vec![1, 2], "in enqueue order");
    let done = json(&["deliveries", "list", "--store", s]);
    for d in done["deliveries"].as_array().unwrap() {
        assert_eq!(
            (&d["status"], &d["attempts"]),
            (&"succeeded".into(), &1.into()),
            "{d}"
        );
    }
    nats.jetstream().delete_stream(&stream).await.unwrap();
}
