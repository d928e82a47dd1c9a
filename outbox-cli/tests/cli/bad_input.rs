//! Bad input: a clear message, exit code 2, and nothing written.

use crate::{outbox, outbox_cmd, sqlite_url, Run};

fn snapshot(s: &str) -> (String, String) {
    let stats = outbox(&["stats", "--store", s, "--json"]).ok();
    let endpoints = outbox(&["endpoints", "list", "--store", s]).ok();
    (stats, endpoints)
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", "{}"]).ok();
    let before = snapshot(s);
    let add = |url: &str, extra: &[&str]| {
        let mut args = vec!["endpoints", "add", "--store", s, "--url", url];
        args.extend_from_slice(extra);
        outbox(&args)
    };
    let cases: Vec<(&str, Run)> = vec![
        ("ftp url", add("ftp://example.com/x", &[])),
        ("file url", add("file:///etc/passwd", &[])),
        (
            "credentials in url",
            add("https://user:pw@example.com/", &[]),
        ),
        ("http without allow", add("http://example.com/hook", &[])),
        ("loopback without allow", add("https://127.0.0.1/hook", &[])),
        ("ipv6 loopback literal", add("https://[::1]/hook", &[])),
        (
            "mapped private address",
            add("https://[::ffff:10.0.0.1]/hook", &[]),
        ),
        (
            "metadata even when private is allowed",
            add("https://169.254.169.254/latest", &["--allow-private"]),
        ),
        (
            "malformed secret",
            add("https://example.com/hook", &["--secret", "whsec_!!"]),
        ),
        (
            "secret without prefix",
            add(
                "https://example.com/hook",
                &["--secret", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
            ),
        ),
        (
            "bad filter",
            add("https://example.com/hook", &["--filter", "Not A Topic"]),
        ),
        (
            "bad topic",
            outbox(&[
                "enqueue",
                "--store",
                s,
                "--topic",
                "Bad Topic",
                "--data",
                "{}",
            ]),
        ),
        (
            "empty topic",
            outbox(&["enqueue", "--store", s, "--topic", "", "--data", "{}"]),
        ),
        (
            "data not json",
            outbox(&["enqueue", "--store", s, "--topic", "a.b", "--data", "nope"]),
        ),
        (
            "key with space",
            outbox(&[
                "enqueue",
                "--store",
                s,
                "--topic",
                "a.b",
                "--data",
                "{}",
                "--key",
                "has space",
            ]),
        ),
        (
            "negative age",
            outbox(&["purge", "--store", s, "--older-than", "-1d"]),
        ),
        (
            "absurd age",
            outbox(&["purge", "--store", s, "--older-than", "99999999999d"]),
        ),
        ("not an id", outbox(&["replay", "--store", s, "not-a-uuid"])),
        (
            "bad status",
            outbox(&["deliveries", "list", "--store", s, "--status", "bogus"]),
        ),
        (
            "bad tenant",
            outbox(&["stats", "--store", s, "--tenant", "a b"]),
        ),
        (
            "unknown scheme",
            outbox(&["stats", "--store", "mysql://localhost/x"]),
        ),
        ("unknown command", outbox(&["frobnicate"])),
    ];
    for (name, r) in &cases {
        assert_eq!(r.code, 2, "{name}: {r:?}");
        assert!(
            r.stderr.contains("error")
                || r.stderr.contains("invalid")
                || r.stderr.contains("refused"),
            "{name}: {r:?}"
        );
        assert!(
            !r.stderr.contains("whsec_!!"),
            "{name}: never echo a secret"
        );
    }
    // Without the vault key, endpoint creation is refused too.
    let r = outbox_cmd()
        .env_remove("OUTBOX_VAULT_KEY")
        .args([
            "endpoints",
            "add",
            "--store",
            s,
            "--url",
            "https://example.com/x",
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    // A store that does not exist is not created by an operator command.
    let missing = format!("sqlite:{}", dir.path().join("missing.sqlite").display());
    assert_eq!(outbox(&["stats", "--store", &missing]).code, 2);
    assert!(!dir.path().join("missing.sqlite").exists());
    assert_eq!(snapshot(s), before, "bad input changed nothing");
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        b"these are not the rows you are looking for\n".repeat(100),
    )
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    let r = outbox(&["stats", "--store", &format!("sqlite:{}", path.display())]);
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn a_url_over_the_limit_once_normalised_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let before = snapshot(s);
    // 2,015 bytes as typed, 6,015 once percent-encoded: the stored form is what counts.
    let long = format!("https://1.1.1.1/{}", "é".repeat(1000));
    assert!(long.len() < 2048);
    let r = outbox(&["endpoints", "add", "--store", s, "--url", &long]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("url"), "{r:?}");
    assert!(
        !r.stderr.contains("1.1.1.1"),
        "the URL is not echoed: {r:?}"
    );
    assert_eq!(snapshot(s), before, "nothing written");
    // A URL exactly at the limit once normalised is accepted and reads back.
    let edge = format!("https://1.1.1.1/{}", "a".repeat(2048 - 16));
    outbox(&["endpoints", "add", "--store", s, "--url", &edge]).ok();
    outbox(&["endpoints", "list", "--store", s]).ok();
}
