//! `enqueue --delay` / `--at` through the real binary: the time is stored and shown, bad
//! input is exit 2 and writes nothing, and a resumed endpoint keeps a delayed message's time.

use std::time::Duration;

use outboxkit_core::{Clock, SystemClock, Timestamp};
use serde_json::Value;

use crate::{outbox, sqlite_url};

fn json(args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.push("--json");
    let out = outbox(&full).ok();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{full:?}: {e}: {out}"))
}

fn time_of(v: &Value) -> Timestamp {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    let t = humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    let ms = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    Timestamp::from_unix_millis(i64::try_from(ms).unwrap()).unwrap()
}

fn add_endpoint(s: &str) -> String {
    let added = json(&[
        "endpoints",
        "add",
        "--store",
        s,
        "--url",
        "http://127.0.0.1:9/in",
        "--allow-http",
        "--allow-private",
    ]);
    added["id"].as_str().unwrap().to_owned()
}

#[test]
fn enqueue_with_a_delay_or_a_time_stores_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    add_endpoint(s);
    let before = SystemClock.now();
    let delayed = json(&[
        "enqueue", "--store", s, "--topic", "a.b", "--data", "{}", "--delay", "10m",
    ]);
    let after = SystemClock.now();
    assert_eq!(delayed["deliveries"], 1, "{delayed}");
    let at = time_of(&delayed["available_at"]);
    let ten = Duration::from_secs(600);
    // Seconds precision is all RFC 3339 output guarantees here; the bound is the enqueue's.
    assert!(
        at >= before
            .saturating_add(ten)
            .saturating_sub(Duration::from_millis(1))
            && at <= after.saturating_add(ten),
        "{delayed}"
    );
    let list = json(&["deliveries", "list", "--store", s]);
    let d = &list["deliveries"][0];
    assert_eq!(d["status"], "pending");
    assert_eq!(time_of(&d["next_attempt_at"]), at);

    let when = SystemClock
        .now()
        .saturating_add(Duration::from_secs(2 * 86_400));
    let when_text = Timestamp::from_unix_millis(when.as_unix_millis() / 1000 * 1000)
        .unwrap()
        .to_rfc3339();
    let text = outbox(&[
        "enqueue", "--store", s, "--topic", "a.c", "--data", "{}", "--at", &when_text,
    ])
    .ok();
    assert!(
        text.contains("with 1 deliveries") && text.contains(&format!("due at {when_text}")),
        "{text}"
    );
    let list = json(&["deliveries", "list", "--store", s]);
    let times: Vec<String> = list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["next_attempt_at"].as_str().unwrap().to_owned())
        .collect();
    assert!(times.contains(&when_text), "{times:?}");
}

#[test]
fn bad_delays_exit_2_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    add_endpoint(s);
    let stats = || outbox(&["stats", "--store", s, "--json"]).ok();
    let before = stats();
    let far = SystemClock
        .now()
        .saturating_add(Duration::from_secs(400 * 86_400))
        .to_rfc3339();
    let soon = SystemClock
        .now()
        .saturating_add(Duration::from_secs(3600))
        .to_rfc3339();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("negative", vec!["--delay", "-5m"], "negative"),
        ("unparsable", vec!["--delay", "soon"], "--delay"),
        ("fractional", vec!["--delay", "1.5h"], "--delay"),
        ("too long", vec!["--delay", "400d"], "maximum delay"),
        (
            "in the past",
            vec!["--at", "2020-01-01T00:00:00Z"],
            "in the past",
        ),
        ("not a time", vec!["--at", "tomorrow"], "--at"),
        ("too far", vec!["--at", &far], "maximum delay"),
        (
            "both",
            vec!["--delay", "5m", "--at", &soon],
            "cannot be used",
        ),
    ];
    for (name, extra, says) in cases {
        let mut args = vec!["enqueue", "--store", s, "--topic", "a.b", "--data", "{}"];
        args.extend(extra);
        let r = outbox(&args);
        assert_eq!(r.code, 2, "{name}: {r:?}");
        assert!(r.stderr.contains(says), "{name}: {r:?}");
    }
    assert_eq!(stats(), before, "bad input wrote nothing");
}

#[test]
fn resuming_an_endpoint_keeps_a_delayed_message_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let ep = add_endpoint(s);
    outbox(&["endpoints", "pause", "--store", s, &ep]).ok();
    let delayed = json(&[
        "enqueue", "--store", s, "--topic", "a.b", "--data", "{}", "--delay", "1h",
    ]);
    let at = time_of(&delayed["available_at"]);
    let list = json(&["deliveries", "list", "--store", s]);
    assert_eq!(list["deliveries"][0]["status"], "held");
    outbox(&["endpoints", "resume", "--store", s, &ep]).ok();
    let list = json(&["deliveries", "list", "--store", s]);
    let d = &list["deliveries"][0];
    assert_eq!(d["status"], "pending");
    assert_eq!(
        time_of(&d["next_attempt_at"]),
        at,
        "due at its own time, not at the resume: {d}"
    );
}
