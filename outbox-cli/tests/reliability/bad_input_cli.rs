//! Part 5, **Bad input catalogue, CLI.** The same kinds of malformed input through the `outbox`
//! command on each store: each exits with code 2 and a message naming the field (or flag),
//! shows no secret or credential, and leaves the store unchanged (the same snapshot as
//! `bad_input`). An unknown tenant in `replay` is "not found" (exit code 1), as the store
//! contract says for another tenant's delivery.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::backend::{Backend, Kind};
use crate::bad_input::{seed, snapshot};
use crate::relay::OUTBOX;

/// What one `outbox` invocation did.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `outbox <args>` with the backend's vault key, for at most 30 s.
pub async fn outbox(b: &Backend, args: &[String]) -> Ran {
    let n = crate::marker("cli");
    let (out, err) = (b.path(&format!("{n}.out")), b.path(&format!("{n}.err")));
    let mut child = Command::new(OUTBOX)
        .args(args)
        .env("OUTBOX_VAULT_KEY", &b.vault_key)
        .env_remove("OUTBOX_STORE")
        .env_remove("OUTBOX_NAMESPACE")
        .env_remove("OUTBOX_LOG")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("an output file"))
        .stderr(std::fs::File::create(&err).expect("an error file"))
        .spawn()
        .expect("run outbox");
    let mut status = None;
    for _ in 0..600 {
        if let Some(s) = child.try_wait().expect("wait for outbox") {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("outbox {args:?} did not finish within 30 s");
    }
    Ran {
        code: status.and_then(|s| s.code()),
        stdout: std::fs::read_to_string(out).unwrap_or_default(),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

async fn scenario(kind: Kind) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("bad-input-cli/{}", kind.name());
    let (endpoint, delivery) = seed(&b).await;
    let (endpoint, delivery) = (endpoint.to_string(), delivery.to_string());
    let before = snapshot(&b).await;
    let long_topic = "a".repeat(129);
    let long_key = "k".repeat(201);
    let loopback = [
        "--allow-http",
        "--allow-private",
        "--url",
        "http://127.0.0.1:9/x",
    ];
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "empty topic",
            vec!["enqueue", "--topic", "", "--data", "{}"],
            "topic",
        ),
        (
            "129-character topic",
            vec!["enqueue", "--topic", &long_topic, "--data", "{}"],
            "topic",
        ),
        (
            "data that is no JSON",
            vec![
                "enqueue",
                "--topic",
                "rel.bad",
                "--data",
                "PAYLOAD-MARKER {",
            ],
            "data",
        ),
        (
            "idempotency key with spaces",
            vec![
                "enqueue",
                "--topic",
                "rel.bad",
                "--data",
                "{}",
                "--key",
                "has a space",
            ],
            "idempotency_key",
        ),
        (
            "201-character idempotency key",
            vec![
                "enqueue", "--topic", "rel.bad", "--data", "{}", "--key", &long_key,
            ],
            "idempotency_key",
        ),
        (
            "empty e-mail recipient",
            vec![
                "enqueue", "--topic", "rel.bad", "--data", "{}", "--email", " ",
            ],
            "recipient",
        ),
        (
            "invalid tenant",
            vec![
                "enqueue",
                "--tenant",
                "bad tenant!",
                "--topic",
                "rel.bad",
                "--data",
                "{}",
            ],
            "tenant",
        ),
        (
            "url with credentials",
            vec![
                "endpoints",
                "add",
                "--url",
                "https://user:s3cr3t-pw@example.com/hook",
            ],
            "url",
        ),
        (
            "file url",
            vec!["endpoints", "add", "--url", "file:///etc/passwd"],
            "url",
        ),
        (
            "http:// without --allow-http",
            vec!["endpoints", "add", "--url", "http://example.com/hook"],
            "url",
        ),
        (
            "private address",
            vec!["endpoints", "add", "--url", "https://10.1.2.3/hook"],
            "url",
        ),
        (
            "IPv6 loopback literal",
            vec!["endpoints", "add", "--url", "https://[::1]/hook"],
            "url",
        ),
        (
            "metadata address, private allowed",
            vec![
                "endpoints",
                "add",
                "--allow-private",
                "--url",
                "https://169.254.169.254/latest",
            ],
            "url",
        ),
        (
            "secret not base64",
            [
                &["endpoints", "add", "--secret", "whsec_notbase64!!"][..],
                &loopback[..],
            ]
            .concat(),
            "secret",
        ),
        (
            "secret without whsec_",
            [
                &["endpoints", "add", "--secret", "notbase64secret"][..],
                &loopback[..],
            ]
            .concat(),
            "secret",
        ),
        (
            "invalid filter",
            [
                &["endpoints", "add", "--filter", "Bad Filter!"][..],
                &loopback[..],
            ]
            .concat(),
            "filter",
        ),
        (
            "rotation to a malformed secret",
            vec![
                "endpoints",
                "rotate-secret",
                &endpoint,
                "--secret",
                "whsec_notbase64!!",
            ],
            "secret",
        ),
        (
            "endpoint id that is no uuid",
            vec!["endpoints", "show", "not-an-id"],
            "endpoint_id",
        ),
        (
            "purge --older-than=-1d",
            vec!["purge", "--older-than=-1d"],
            "duration",
        ),
        (
            "purge older than 100 years",
            vec!["purge", "--older-than", "99999999d"],
            "duration",
        ),
        (
            "purge batch of 0",
            vec!["purge", "--older-than", "30d", "--batch", "0"],
            "limit",
        ),
        (
            "replay in an invalid tenant",
            vec!["replay", "--tenant", "bad tenant!", &delivery],
            "tenant",
        ),
        ("replay of no uuid", vec!["replay", "42"], "delivery_id"),
        (
            "release-held of no uuid",
            vec!["release-held", "--endpoint", "x"],
            "endpoint_id",
        ),
        (
            "page of 0",
            vec!["deliveries", "list", "--limit", "0"],
            "limit",
        ),
        (
            "forged cursor",
            vec!["deliveries", "list", "--cursor", "garbage"],
            "cursor",
        ),
        (
            "unknown status",
            vec!["deliveries", "list", "--status", "bogus"],
            "status",
        ),
    ];
    let forbidden = [
        "s3cr3t-pw",
        "notbase64",
        "/etc/passwd",
        "PAYLOAD-MARKER",
        &b.vault_key,
    ];
    let count = cases.len();
    for (label, args, field) in cases {
        // The subcommand (one or two words), the store, then the case's own arguments.
        let sub = if matches!(args[0], "endpoints" | "deliveries") {
            2
        } else {
            1
        };
        let mut full = strings(&args[..sub]);
        full.extend(b.store_args());
        full.extend(strings(&args[sub..]));
        let ran = outbox(&b, &full).await;
        assert_eq!(
            ran.code,
            Some(2),
            "[{name}] {label}: {full:?} exited {:?}: {}{}",
            ran.code,
            ran.stdout,
            ran.stderr
        );
        assert!(
            ran.stderr.contains(field),
            "[{name}] {label}: {}",
            ran.stderr
        );
        for f in forbidden {
            let all = format!("{}{}", ran.stdout, ran.stderr);
            assert!(
                !all.contains(f),
                "[{name}] {label}: the output shows {f:?}: {all}"
            );
        }
    }
    let mut args = strings(&["replay"]);
    args.extend(b.store_args());
    args.extend(strings(&["--tenant", "nobody", &delivery]));
    let ran = outbox(&b, &args).await;
    assert_eq!(ran.code, Some(1), "[{name}] unknown tenant: {ran:?}");
    assert!(ran.stderr.contains("not found"), "[{name}] {}", ran.stderr);
    let unknown_store = outbox(&b, &strings(&["stats", "--store", "ftp://example.com/x"])).await;
    assert_eq!(unknown_store.code, Some(2), "[{name}] {unknown_store:?}");
    assert!(
        unknown_store.stderr.contains("store"),
        "[{name}] {unknown_store:?}"
    );

    let after = snapshot(&b).await;
    assert_eq!(before, after, "[{name}] bad input changed the store");
    eprintln!(
        "[{name}] {count} malformed invocations exited 2 naming the field, 1 unknown tenant \
         exited 1 (not found), an unknown store scheme exited 2; the store is unchanged"
    );
}

#[test]
fn postgres() {
    crate::run(
        "bad-input-cli/postgres",
        Duration::from_secs(180),
        scenario(Kind::Postgres),
    );
}

#[test]
fn sqlite() {
    crate::run(
        "bad-input-cli/sqlite",
        Duration::from_secs(180),
        scenario(Kind::Sqlite),
    );
}

#[test]
fn redis() {
    crate::run(
        "bad-input-cli/redis",
        Duration::from_secs(180),
        scenario(Kind::Redis),
    );
}
