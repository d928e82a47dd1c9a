//! `outbox cancel`: one delivery by id, every waiting delivery of `--message`, and by filter,
//! with `--dry-run` and `--json`, on SQLite; a cancelled delivery is dead and `replay` sends it
//! again; a finished one, bad input and another tenant's message are refused.

use serde_json::Value;

use crate::{id_after, outbox, sqlite_url};

fn run(store: &str, args: &[&str]) -> crate::Run {
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["--store", store]);
    outbox(&full)
}

fn json(store: &str, args: &[&str]) -> Value {
    let mut full: Vec<&str> = args.to_vec();
    full.push("--json");
    let out = run(store, &full).ok();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{full:?}: {e}: {out}"))
}

fn stats(store: &str) -> (u64, u64) {
    let s = json(store, &["stats"]);
    (s["pending"].as_u64().unwrap(), s["dead"].as_u64().unwrap())
}

/// The ids of a message's deliveries, from `deliveries list --json`.
fn deliveries_of(store: &str, message: &str) -> Vec<String> {
    let list = json(store, &["deliveries", "list"]);
    let items = list
        .get("deliveries")
        .or_else(|| list.get("items"))
        .unwrap_or(&list)
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .clone();
    items
        .iter()
        .filter(|d| d["message_id"] == message)
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn cancel_by_id_message_and_filter() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &store]).ok();
    let add = |url: &str| {
        let out = run(
            &store,
            &[
                "endpoints",
                "add",
                "--url",
                url,
                "--allow-http",
                "--allow-private",
            ],
        )
        .ok();
        id_after(&out, "created endpoint ")
    };
    let first = add("http://127.0.0.1:9/one");
    add("http://127.0.0.1:9/two");
    let mut messages = Vec::new();
    for topic in ["order.created", "order.created", "user.created"] {
        let out = run(&store, &["enqueue", "--topic", topic, "--data", "{}"]).ok();
        messages.push(id_after(&out, "enqueued message "));
    }
    assert_eq!(stats(&store), (6, 0));

    // One delivery by id: a dry run changes nothing, then it is cancelled.
    let ids = deliveries_of(&store, &messages[0]);
    assert_eq!(ids.len(), 2);
    let dry = json(&store, &["cancel", &ids[0], "--dry-run"]);
    assert_eq!(
        (&dry["action"], &dry["would_change"], &dry["changed"]),
        (&Value::from("cancel"), &Value::from(1), &Value::from(0)),
        "{dry}"
    );
    assert_eq!(stats(&store), (6, 0));
    let done = json(&store, &["cancel", &ids[0]]);
    assert_eq!(done["changed"], 1, "{done}");
    assert_eq!(done["deliveries"][0]["status"], "dead", "{done}");
    assert_eq!(done["deliveries"][0]["dead_reason"], "cancelled", "{done}");
    assert_eq!(stats(&store), (5, 1));
    // Finished now: refused with a clear message, nothing changes.
    let again = run(&store, &["cancel", &ids[0]]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("already finished"), "{again:?}");
    assert_eq!(stats(&store), (5, 1));

    // The whole message: the other delivery is cancelled, the cancelled one skipped.
    let dry = json(&store, &["cancel", "--message", &messages[0], "--dry-run"]);
    assert_eq!(
        (&dry["would_cancel"], &dry["skipped"], &dry["cancelled"]),
        (&Value::from(1), &Value::from(1), &Value::from(0)),
        "{dry}"
    );
    assert_eq!(stats(&store), (5, 1));
    let done = json(&store, &["cancel", "--message", &messages[0]]);
    assert_eq!(
        (&done["cancelled"], &done["skipped"]),
        (&Value::from(1), &Value::from(1)),
        "{done}"
    );
    assert!(done["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["dead_reason"] == "cancelled"));
    let text = run(&store, &["cancel", "--message", &messages[0]]).ok();
    assert!(text.contains("cancelled 0 deliveries"), "{text}");
    assert!(text.contains("skipped 2"), "{text}");
    assert_eq!(stats(&store), (4, 2));

    // By filter: only the first endpoint's order.created deliveries.
    let dry = json(
        &store,
        &[
            "cancel",
            "--endpoint",
            &first,
            "--topic",
            "order.created",
            "--dry-run",
        ],
    );
    assert_eq!(dry["matched"], 1, "{dry}");
    assert_eq!(stats(&store), (4, 2));
    let text = run(
        &store,
        &["cancel", "--endpoint", &first, "--topic", "order.created"],
    )
    .ok();
    assert!(text.contains("cancelled 1 deliveries"), "{text}");
    assert_eq!(stats(&store), (3, 3));

    // A cancelled delivery is dead: replay by its reason sends it again.
    let dry = json(
        &store,
        &["replay", "--dead-reason", "cancelled", "--all", "--dry-run"],
    );
    assert_eq!(dry["matched"], 3, "{dry}");
    let replayed = json(&store, &["replay", &ids[0]]);
    assert_eq!(replayed["deliveries"][0]["status"], "pending", "{replayed}");
    assert_eq!(stats(&store), (4, 2));

    // Bad input is exit 2 and changes nothing; an unknown message is not found (exit 1).
    for args in [
        vec!["cancel"],
        vec!["cancel", &ids[1], "--topic", "order.created"],
        vec!["cancel", "--message", &messages[1], "--all"],
        vec!["cancel", "--message", &messages[1], &ids[1]],
        vec!["cancel", "--message", "not-an-id"],
        vec!["cancel", "--status", "dead", "--all"],
        vec!["cancel", "not-an-id"],
    ] {
        let r = run(&store, &args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
    }
    let r = run(
        &store,
        &["cancel", "--message", &messages[1], "--tenant", "other"],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("not found"), "{r:?}");
    assert_eq!(stats(&store), (4, 2));
}
