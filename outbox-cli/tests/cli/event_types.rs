//! `outbox event-types` through the real binary: add, update, list, show, delete, mode, with
//! and without `--json`; `outbox enqueue` refused (exit 2, naming the failing path) in each
//! mode; endpoint filters checked against the catalogue; bad schemas change nothing. On
//! SQLite and PostgreSQL.

use serde_json::Value;

use crate::{outbox, sqlite_url};

fn run(store: &[&str], args: &[&str]) -> crate::Run {
    let mut all: Vec<&str> = args.to_vec();
    all.extend_from_slice(store);
    outbox(&all)
}

fn json(store: &[&str], args: &[&str]) -> Value {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json");
    let out = run(store, &all).ok();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

const SCHEMA: &str = r#"{"type":"object","required":["id"],"properties":{"id":{"type":"integer"},"items":{"type":"array","items":{"type":"object","properties":{"price":{"type":"number","minimum":0}}}}}}"#;

fn scenario(store: &[&str], dir: &std::path::Path) {
    run(store, &["migrate"]).ok();
    // Mode off by default: anything is enqueued.
    assert_eq!(json(store, &["event-types", "mode"])["mode"], "off");
    run(store, &["enqueue", "--topic", "any.thing", "--data", "{}"]).ok();

    let schema_file = dir.join("order.schema.json");
    std::fs::write(&schema_file, SCHEMA).unwrap();
    let at_file = format!("@{}", schema_file.display());
    let added = json(
        store,
        &[
            "event-types",
            "add",
            "--topic",
            "order.created",
            "--description",
            "an order was placed",
            "--schema",
            &at_file,
        ],
    );
    assert_eq!(added["event_type"]["topic"], "order.created");
    assert_eq!(added["event_type"]["schema"]["required"][0], "id");
    let text = run(
        store,
        &[
            "event-types",
            "add",
            "--topic",
            "invoice.sent",
            "--description",
            "<b>sent</b>",
        ],
    )
    .ok();
    assert!(text.contains("added event type invoice.sent"), "{text}");
    // Adding a registered topic again is refused; updating a missing one is not found.
    let again = run(store, &["event-types", "add", "--topic", "order.created"]);
    assert_eq!(again.code, 2, "{again:?}");
    assert!(again.stderr.contains("already registered"), "{again:?}");
    assert_eq!(
        run(store, &["event-types", "update", "--topic", "no.such"]).code,
        1
    );
    // A schema that does not compile or is not JSON is refused and changes nothing.
    for bad in [r#"{"type": 12}"#, "{not json", "[1]"] {
        let r = run(
            store,
            &[
                "event-types",
                "update",
                "--topic",
                "order.created",
                "--schema",
                bad,
            ],
        );
        assert_eq!(r.code, 2, "{bad}: {r:?}");
        assert!(r.stderr.contains("schema"), "{bad}: {r:?}");
    }
    let shown = json(store, &["event-types", "show", "--topic", "order.created"]);
    assert_eq!(shown["event_type"], added["event_type"], "unchanged");
    let text = run(store, &["event-types", "show", "--topic", "order.created"]).ok();
    assert!(
        text.contains("an order was placed") && text.contains("\"minimum\""),
        "{text}"
    );

    let list = json(store, &["event-types", "list"]);
    let topics: Vec<&str> = list["event_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics, ["invoice.sent", "order.created"]);
    let table = run(store, &["event-types", "list"]).ok();
    assert!(
        table.contains("an order was placed") && table.contains("mode: off"),
        "{table}"
    );

    // refuse-unknown: an unregistered topic is refused (exit 2) and nothing is written.
    assert_eq!(
        json(store, &["event-types", "mode", "refuse-unknown"])["mode"],
        "refuse-unknown"
    );
    let before = json(store, &["tenants", "list"]);
    let r = run(store, &["enqueue", "--topic", "order.paid", "--data", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("order.paid") && r.stderr.contains("catalogue"),
        "{r:?}"
    );
    run(
        store,
        &[
            "enqueue",
            "--topic",
            "order.created",
            "--data",
            "{\"no\":\"id\"}",
        ],
    )
    .ok();

    // validate: the payload is checked, the error names the path and rule, not the value.
    run(store, &["event-types", "mode", "validate"]).ok();
    let r = run(
        store,
        &[
            "enqueue",
            "--topic",
            "order.created",
            "--data",
            r#"{"id":1,"items":[{"price":-98765}]}"#,
        ],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("/items/0/price") && r.stderr.contains("minimum"),
        "{r:?}"
    );
    assert!(
        !r.stderr.contains("98765"),
        "no payload value in the error: {r:?}"
    );
    run(
        store,
        &[
            "enqueue",
            "--topic",
            "order.created",
            "--data",
            r#"{"id":1,"items":[{"price":2}]}"#,
        ],
    )
    .ok();
    let after = json(store, &["tenants", "list"]);
    let messages = |v: &Value| -> u64 {
        v["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["messages"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        messages(&after),
        messages(&before) + 2,
        "only the accepted ones were written"
    );

    // Endpoint filters are checked against the catalogue when the mode is not off.
    let add_endpoint = |filter: &str| {
        run(
            store,
            &[
                "endpoints",
                "add",
                "--url",
                "http://127.0.0.1:9/hook",
                "--allow-http",
                "--allow-private",
                "--filter",
                filter,
            ],
        )
    };
    let r = add_endpoint("order.shipped");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("order.shipped"), "{r:?}");
    let r = add_endpoint("billing.*");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("billing.*"), "{r:?}");
    add_endpoint("order.*").ok();
    add_endpoint("invoice.sent,order.created").ok();

    // Update and remove the schema; delete a type; mode off accepts anything again.
    let updated = json(
        store,
        &[
            "event-types",
            "update",
            "--topic",
            "order.created",
            "--schema",
            "none",
        ],
    );
    assert_eq!(updated["event_type"]["schema"], Value::Null);
    assert_eq!(updated["event_type"]["description"], "an order was placed");
    assert_eq!(
        updated["event_type"]["created_at"],
        added["event_type"]["created_at"]
    );
    run(
        store,
        &["enqueue", "--topic", "order.created", "--data", "[]"],
    )
    .ok();
    assert_eq!(
        json(store, &["event-types", "delete", "--topic", "invoice.sent"])["deleted"],
        "invoice.sent"
    );
    assert_eq!(
        run(store, &["event-types", "show", "--topic", "invoice.sent"]).code,
        1
    );
    assert_eq!(run(store, &["event-types", "mode", "strict"]).code, 2);
    assert!(run(store, &["event-types", "mode", "off"])
        .ok()
        .contains("mode: off"));
    run(
        store,
        &["enqueue", "--topic", "invoice.sent", "--data", "{}"],
    )
    .ok();
}

#[test]
fn event_types_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    scenario(&["--store", &url], dir.path());
}

#[tokio::test]
async fn event_types_on_postgres() {
    let Some((url, pool)) = crate::postgres_pool(1).await else {
        return;
    };
    pool.close().await;
    let ns = crate::namespace("cli_catalogue");
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        scenario(
            &["--store", url.as_str(), "--namespace", ns.as_str()],
            dir.path(),
        )
    })
    .await
    .unwrap();
}
