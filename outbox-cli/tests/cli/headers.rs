//! `outbox endpoints add|update --header/--secret-header/--remove-header` through the real
//! binary: shown (secret values masked), stored sealed, sent by `endpoints test` and the
//! relay, and bad headers exit 2 and change nothing.

use outboxkit_testing::WebhookReceiver;
use serde_json::Value;

use crate::{id_after, outbox, sqlite_url};

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_are_shown_masked_stored_sealed_and_sent() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let receiver = WebhookReceiver::start().await.unwrap();
    let added = json(
        &outbox(&[
            "endpoints",
            "add",
            "--store",
            s,
            "--url",
            &receiver.url(),
            "--header",
            "X-Route: eu-west",
            "--secret-header",
            "Authorization: Bearer key-one",
            "--allow-http",
            "--allow-private",
            "--json",
        ])
        .ok(),
    );
    let ep = added["id"].as_str().unwrap().to_owned();
    receiver.set_secrets(vec![outboxkit_core::WebhookSecret::parse(
        added["secret"].as_str().unwrap(),
    )
    .unwrap()]);
    assert_eq!(
        added["headers"],
        serde_json::json!([
            {"name": "x-route", "value": "eu-west", "secret": false},
            {"name": "authorization", "value": null, "secret": true},
        ])
    );
    // Sealed in the store: the file never holds the secret value.
    let mut file = std::fs::read(dir.path().join("outbox.sqlite")).unwrap();
    file.extend(std::fs::read(dir.path().join("outbox.sqlite-wal")).unwrap_or_default());
    let has = |needle: &[u8]| file.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"eu-west"), "the plain value is stored");
    assert!(!has(b"key-one"), "the secret value is sealed");

    let shown = outbox(&["endpoints", "show", "--store", s, &ep]).ok();
    assert!(shown.contains("x-route: eu-west"), "{shown}");
    assert!(
        shown.contains("authorization: ******** (secret)"),
        "{shown}"
    );
    assert!(!shown.contains("key-one"), "{shown}");
    let shown = json(&outbox(&["endpoints", "show", "--store", s, &ep, "--json"]).ok());
    assert_eq!(shown["headers"], added["headers"]);
    let listed = outbox(&["endpoints", "list", "--store", s]).ok();
    assert!(
        listed.contains("x-route, authorization (secret)"),
        "{listed}"
    );
    assert!(!listed.contains("key-one"), "{listed}");
    let listed = json(&outbox(&["endpoints", "list", "--store", s, "--json"]).ok());
    assert_eq!(listed["endpoints"][0]["headers"], added["headers"]);

    // `endpoints test` sends them, the secret one opened.
    outbox(&[
        "endpoints",
        "test",
        "--store",
        s,
        &ep,
        "--allow-http",
        "--allow-private",
        "--json",
    ])
    .ok();
    let got = receiver.requests().pop().unwrap();
    assert!(got.verified());
    assert_eq!(got.header("x-route"), Some("eu-west"));
    assert_eq!(got.header("authorization"), Some("Bearer key-one"));

    // Rotate the secret value, drop the plain one; the relay sends what is set now.
    let updated = json(
        &outbox(&[
            "endpoints",
            "update",
            "--store",
            s,
            &ep,
            "--secret-header",
            "authorization: Bearer key-two",
            "--remove-header",
            "X-Route",
            "--header",
            "X-Tenant: acme",
            "--json",
        ])
        .ok(),
    );
    assert_eq!(
        updated["headers"],
        serde_json::json!([
            {"name": "authorization", "value": null, "secret": true},
            {"name": "x-tenant", "value": "acme", "secret": false},
        ])
    );
    outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", "{}"]).ok();
    outbox(&[
        "relay",
        "--store",
        s,
        "--until-idle",
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    let got = receiver.requests().pop().unwrap();
    assert!(got.verified());
    assert_eq!(got.header("authorization"), Some("Bearer key-two"));
    assert_eq!(got.header("x-tenant"), Some("acme"));
    assert_eq!(got.header("x-route"), None);
}

#[test]
fn bad_headers_exit_2_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let add = |extra: &[&str]| {
        let mut args = vec![
            "endpoints",
            "add",
            "--store",
            s,
            "--url",
            "http://127.0.0.1:9/in",
            "--allow-http",
            "--allow-private",
        ];
        args.extend_from_slice(extra);
        outbox(&args)
    };
    let bad: &[(&[&str], &str)] = &[
        (&["--header", "Webhook-Id: forged"], "webhook-id"),
        (&["--header", "Content-Length: 1"], "content-length"),
        (&["--header", "Host: evil.example"], "host"),
        (
            &["--secret-header", "Transfer-Encoding: chunked"],
            "transfer-encoding",
        ),
        (&["--header", "X-A: 1", "--header", "x-a: 2"], "x-a"),
        (&["--header", "X Bad: 1"], "x bad"),
        (&["--header", "X-Crlf: a\r\nx-evil: 1"], "x-crlf"),
        (&["--header", "no colon"], "name: value"),
    ];
    for (args, names) in bad {
        let r = add(args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.to_ascii_lowercase().contains(names),
            "{args:?} names the header: {}",
            r.stderr
        );
    }
    let listed = json(&outbox(&["endpoints", "list", "--store", s, "--json"]).ok());
    assert_eq!(
        listed["endpoints"],
        serde_json::json!([]),
        "nothing created"
    );

    let added = add(&["--header", "X-Keep: 1"]).ok();
    let ep = id_after(&added, "created endpoint ");
    let before = outbox(&["endpoints", "show", "--store", s, &ep, "--json"]).ok();
    let too_many: Vec<String> = (0..20).map(|i| format!("x-more-{i}: v")).collect();
    let mut many_args: Vec<&str> = Vec::new();
    for h in &too_many {
        many_args.extend(["--header", h.as_str()]);
    }
    let bad_updates: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--header", "webhook-signature: v1,x"],
            "webhook-signature",
        ),
        (vec!["--remove-header", "X-Missing"], "x-missing"),
        (
            vec!["--header", "X-Keep: 2", "--remove-header", "x-keep"],
            "x-keep",
        ),
        (many_args, "at most 20"),
        (
            vec!["--header", "User-Agent: me", "--description", "changed"],
            "user-agent",
        ),
    ];
    for (extra, names) in bad_updates {
        let mut args = vec!["endpoints", "update", "--store", s, ep.as_str()];
        args.extend(extra.iter().copied());
        let r = outbox(&args);
        assert_eq!(r.code, 2, "{extra:?}: {r:?}");
        assert!(
            r.stderr.to_ascii_lowercase().contains(names),
            "{extra:?}: {}",
            r.stderr
        );
        assert_eq!(
            outbox(&["endpoints", "show", "--store", s, &ep, "--json"]).ok(),
            before,
            "{extra:?} changed nothing"
        );
    }
}
