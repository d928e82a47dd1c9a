//! The attempt in full through the real binary on SQLite, PostgreSQL and Redis: `outbox
//! relay` delivers to a loopback receiver (its answer cut at `--response-body-cap`), then
//! `outbox deliveries show` (text and `--json`) and `GET …/deliveries/{id}` from `outbox
//! serve` show the request headers as sent (the secret header redacted), the payload and
//! the response body; a hostile answer reaches the terminal escaped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use outboxkit_testing::{Reply, WebhookReceiver};
use serde_json::Value;

use crate::{free_port, outbox, outbox_cmd, sqlite_url};

/// What the receiver answers: longer than the cap of 24 bytes, with escape sequences.
const HOSTILE: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}<b>not your terminal</b> and more";
const CAP: usize = 24;

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn header<'a>(headers: &'a Value, name: &str) -> Option<&'a str> {
    headers
        .as_array()?
        .iter()
        .find(|h| h["name"] == name)
        .and_then(|h| h["value"].as_str())
}

/// `GET path` over HTTP/1.1 with a bearer token: the status and the body.
fn get(port: u16, path: &str, token: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (code, body)
}

/// The whole path against one store (`--store URL [--namespace NS]`).
fn the_attempt_in_full(store: &[String], receiver: &WebhookReceiver) {
    let with = |args: &[&str]| {
        let mut a: Vec<&str> = args.to_vec();
        a.extend(store.iter().map(String::as_str));
        outbox(&a)
    };
    with(&["migrate"]).ok();
    let added = json(
        &with(&[
            "endpoints",
            "add",
            "--url",
            &receiver.url(),
            "--secret-header",
            "X-Api-Key: key-one",
            "--header",
            "X-Route: eu",
            "--allow-http",
            "--allow-private",
            "--json",
        ])
        .ok(),
    );
    receiver.set_secrets(vec![outboxkit_core::WebhookSecret::parse(
        added["secret"].as_str().unwrap(),
    )
    .unwrap()]);
    receiver.script([Reply::Body(200, HOSTILE.into())]);
    with(&[
        "enqueue",
        "--topic",
        "order.created",
        "--data",
        r#"{"order":42,"note":"caf\u00e9"}"#,
    ])
    .ok();
    let cap = CAP.to_string();
    with(&[
        "relay",
        "--until-idle",
        "--allow-http",
        "--allow-private",
        "--response-body-cap",
        &cap,
    ])
    .ok();
    let sent = receiver.requests().pop().expect("delivered");
    assert!(sent.verified());
    let list = json(&with(&["deliveries", "list", "--json"]).ok());
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();

    // Text: the request headers as sent, the payload once, the answer cut and escaped.
    let text = with(&["deliveries", "show", &id]).ok();
    let signature = sent.header("webhook-signature").unwrap();
    assert!(
        text.contains(&format!("webhook-signature: {signature}")),
        "{text}"
    );
    assert!(text.contains("x-api-key: [redacted]"), "{text}");
    assert!(text.contains("x-route: eu"), "{text}");
    assert!(!text.contains("key-one"), "{text}");
    assert!(text.contains("\"order\": 42"), "pretty JSON: {text}");
    assert!(text.contains("café"), "{text}");
    assert!(
        text.contains(&format!("response body: {CAP} B (truncated at the cap")),
        "{text}"
    );
    assert!(text.contains("\\u{1b}[2J\\u{1b}]0;pwned\\u{7}"), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "no raw control character reaches the terminal: {text:?}"
    );
    assert!(text.contains("remote address: 127.0.0.1:"), "{text}");

    // JSON: the detail, the body as base64 and text.
    let shown = json(&with(&["deliveries", "show", &id, "--json"]).ok());
    let a = &shown["attempts"][0];
    let d = &a["detail"];
    assert_eq!(
        header(&d["request_headers"], "webhook-signature"),
        Some(signature)
    );
    assert_eq!(
        header(&d["request_headers"], "x-api-key"),
        Some("[redacted]")
    );
    let body = base64::engine::general_purpose::STANDARD
        .decode(d["response_body_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(body, &HOSTILE.as_bytes()[..CAP]);
    assert_eq!(d["response_body_truncated"], true);
    assert_eq!(
        d["response_body_text"],
        String::from_utf8_lossy(&body).as_ref()
    );
    assert_eq!(shown["payload"]["json"]["order"], 42);
    assert_eq!(a["payload"]["sha256"], shown["payload"]["sha256"]);

    // The API of `outbox serve` shows the same.
    let token = json(
        &with(&[
            "tokens", "create", "--tenant", "default", "--label", "ci", "--json",
        ])
        .ok(),
    )["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let port = free_port();
    let mut args = vec![
        "serve".to_owned(),
        "--listen".to_owned(),
        format!("127.0.0.1:{port}"),
    ];
    args.extend(store.iter().cloned());
    let mut child = outbox_cmd()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..100).any(|_| {
        let ok = TcpStream::connect(("127.0.0.1", port)).is_ok();
        if !ok {
            std::thread::sleep(Duration::from_millis(100));
        }
        ok
    });
    let answer = up.then(|| {
        get(
            port,
            &format!("/v1/tenants/default/deliveries/{id}"),
            &token,
        )
    });
    let _ = child.kill();
    let _ = child.wait();
    let (code, body) = answer.expect("outbox serve listens");
    assert_eq!(code, 200, "{body}");
    let api = json(&body);
    let d = &api["attempts"][0]["detail"];
    assert_eq!(
        header(&d["request_headers"], "webhook-signature"),
        Some(signature)
    );
    assert_eq!(
        header(&d["request_headers"], "x-api-key"),
        Some("[redacted]")
    );
    assert_eq!(
        d["response_body_base64"],
        shown["attempts"][0]["detail"]["response_body_base64"]
    );
    assert_eq!(api["payload"]["json"]["order"], 42);
    assert!(!body.contains("key-one"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attempt_in_full_on_sqlite() {
    let receiver = WebhookReceiver::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = vec!["--store".to_owned(), sqlite_url(dir.path())];
    tokio::task::spawn_blocking(move || the_attempt_in_full(&store, &receiver))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attempt_in_full_on_postgres() {
    let receiver = WebhookReceiver::start().await.unwrap();
    crate::on_postgres("cli_detail", move |url, ns| {
        let store = vec!["--store".to_owned(), url, "--namespace".to_owned(), ns];
        the_attempt_in_full(&store, &receiver)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attempt_in_full_on_redis() {
    let receiver = WebhookReceiver::start().await.unwrap();
    crate::on_redis("cli-detail", move |url, ns| {
        let store = vec!["--store".to_owned(), url, "--namespace".to_owned(), ns];
        the_attempt_in_full(&store, &receiver)
    })
    .await;
}

/// A cap above the transport's 64 KiB read cap is refused before anything starts: no
/// store is opened or created.
#[test]
fn a_response_body_cap_above_64_kib_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let r = outbox(&[
        "relay",
        "--store",
        &store,
        "--until-idle",
        "--response-body-cap",
        "65537",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--response-body-cap: 65537 bytes is more than 65536"),
        "{}",
        r.stderr
    );
    assert!(!dir.path().join("outbox.sqlite").exists(), "nothing opened");
}
