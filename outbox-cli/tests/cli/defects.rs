//! One test per defect of issue 17: broken pipes, cross-tenant release-held, duration caps,
//! an unreachable Redis, rotation while a rotation is in progress.

use std::process::Stdio;
use std::time::Duration;

use outboxkit_testing::WebhookReceiver;

use crate::{id_after, outbox, outbox_cmd, sqlite_url};

/// A migrated SQLite store with one loopback endpoint and `n` pending deliveries to it.
fn seeded(dir: &std::path::Path, url: &str, n: usize) -> (String, String, String) {
    let store = sqlite_url(dir);
    outbox(&["migrate", "--store", &store]).ok();
    let out = outbox(&[
        "endpoints",
        "add",
        "--store",
        &store,
        "--url",
        url,
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    let ep = id_after(&out, "created endpoint ");
    let secret = id_after(&out, "(shown once): ");
    for i in 0..n {
        outbox(&[
            "enqueue",
            "--store",
            &store,
            "--topic",
            "order.created",
            "--data",
            &format!(r#"{{"i":{i}}}"#),
        ])
        .ok();
    }
    (store, ep, secret)
}

#[test]
fn a_closed_pipe_ends_list_and_stats_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _, _) = seeded(dir.path(), "http://127.0.0.1:9/hook", 3);
    for args in [
        vec!["deliveries", "list", "--store", &store],
        vec!["deliveries", "list", "--store", &store, "--json"],
        vec!["stats", "--store", &store],
    ] {
        let mut child = outbox_cmd()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before the command writes (like `| head -1` that is done).
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn release_held_on_another_tenants_endpoint_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let (store, ep, _) = seeded(dir.path(), "http://127.0.0.1:9/hook", 0);
    let r = outbox(&[
        "release-held",
        "--store",
        &store,
        "--tenant",
        "other",
        "--endpoint",
        &ep,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("not found"), "{r:?}");
    // Its own tenant still may.
    assert!(
        outbox(&["release-held", "--store", &store, "--endpoint", &ep])
            .ok()
            .contains("released 0")
    );
}

#[test]
fn every_duration_unit_respects_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _, _) = seeded(dir.path(), "http://127.0.0.1:9/hook", 2);
    let snapshot = || outbox(&["deliveries", "list", "--store", &store, "--json"]).ok();
    let before = snapshot();
    for (flag, value, args) in [
        ("older-than", "99999999999999999ms", vec!["purge"]),
        ("older-than", "3153600001s", vec!["purge"]),
        ("older-than", "52560001m", vec!["purge"]),
        ("older-than", "876001h", vec!["purge"]),
        ("since", "99999999999999999ms", vec!["deliveries", "list"]),
        ("since", "99999999999999999ms", vec!["replay"]),
    ] {
        let mut full = args.clone();
        let f = format!("--{flag}");
        full.extend(["--store", &store, &f, value]);
        let r = outbox(&full);
        assert_eq!(r.code, 2, "{full:?}: {r:?}");
        assert!(r.stderr.contains(&f), "the error names the flag: {r:?}");
    }
    let r = outbox_cmd()
        .args([
            "relay",
            "--store",
            &store,
            "--poll-interval",
            "99999999999999999ms",
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    assert_eq!(snapshot(), before, "nothing changed");
}

#[test]
fn an_unreachable_redis_fails_with_a_clear_message() {
    // A port nothing listens on, and a server that accepts but never answers (a firewall, a
    // wrong service): both must end with a clear message, not hang.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("redis://{}", silent.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    for url in ["redis://127.0.0.1:1".to_owned(), silent_url] {
        let mut child = outbox_cmd()
            .args(["stats", "--store", &url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A watchdog: a command still running after 20 s is reported as hanging.
        let mut status = None;
        for _ in 0..400 {
            if let Some(s) = child.try_wait().unwrap() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if status.is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(status.is_some(), "{url}: the command hung: {stderr}");
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(
            stderr.contains("cannot open the store") && stderr.contains("redis"),
            "{url}: {stderr}"
        );
    }
}

// The receiver is served by the runtime while this test blocks on child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_during_a_rotation_needs_force() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = WebhookReceiver::start().await.unwrap();
    let (store, ep, first) = seeded(dir.path(), &receiver.url(), 0);
    let s = store.as_str();
    let test = || {
        outbox(&[
            "endpoints",
            "test",
            "--store",
            s,
            &ep,
            "--allow-http",
            "--allow-private",
        ])
    };
    let second = id_after(
        &outbox(&["endpoints", "rotate-secret", "--store", s, &ep]).ok(),
        "(shown once): ",
    );
    let shown = |s: &str| -> serde_json::Value {
        serde_json::from_str(&outbox(&["endpoints", "show", "--store", s, &ep, "--json"]).ok())
            .unwrap()
    };
    let before = shown(s);
    assert_eq!(before["rotation_in_progress"], true);

    let r = outbox(&["endpoints", "rotate-secret", "--store", s, &ep]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("warning") && r.stderr.contains("--force"),
        "{r:?}"
    );
    assert!(!r.stdout.contains("whsec_"), "no new secret: {r:?}");
    assert_eq!(shown(s), before, "nothing changed");
    // The first secret still signs.
    receiver.set_secrets(vec![outboxkit_core::WebhookSecret::parse(&first).unwrap()]);
    test().ok();
    assert!(receiver.wait_for(1, Duration::from_secs(5)).await);
    assert!(receiver.requests()[0].verified());

    let forced = outbox(&["endpoints", "rotate-secret", "--store", s, &ep, "--force"]).ok();
    let third = id_after(&forced, "(shown once): ");
    assert_ne!(third, second);
    // Now the first secret is gone: a receiver that knows only it rejects the signature.
    test().ok();
    assert!(receiver.wait_for(2, Duration::from_secs(5)).await);
    assert!(!receiver.requests()[1].verified());
}

#[test]
fn tenant_and_vault_key_flags_only_where_used() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    for args in [
        vec!["migrate", "--store", &store, "--tenant", "a"],
        vec!["migrate", "--store", &store, "--vault-key", "00"],
        vec!["deliveries", "list", "--store", &store, "--vault-key", "00"],
        vec!["consumers", "list", "--store", &store, "--tenant", "a"],
    ] {
        let r = outbox(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains("unexpected argument"), "{r:?}");
    }
}
