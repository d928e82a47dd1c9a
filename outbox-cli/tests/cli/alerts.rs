//! `outbox relay --dead-letter-webhook … --alert-secret …`: the alert is signed like every
//! webhook and is out before `--until-idle` exits.

use outboxkit_core::{OsEntropy, WebhookSecret};
use outboxkit_testing::WebhookReceiver;

use crate::{outbox, outbox_cmd, sqlite_url, Run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_until_idle_relay_sends_its_signed_dead_letter_alert_before_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    // The receiver answers 410 Gone: the delivery goes dead on its first attempt.
    let endpoint = gone_endpoint(s).await;
    outbox(&[
        "enqueue",
        "--store",
        s,
        "--topic",
        "order.created",
        "--data",
        "{\"n\":1}",
    ])
    .ok();
    let secret = WebhookSecret::generate(&OsEntropy);
    let alerts = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![secret.clone()]);
    let out = Run::from(
        outbox_cmd()
            .args([
                "relay",
                "--store",
                s,
                "--until-idle",
                "--allow-http",
                "--allow-private",
                "--dead-letter-webhook",
                &alerts.url(),
            ])
            .env("OUTBOX_ALERT_SECRET", secret.expose())
            .output()
            .unwrap(),
    )
    .ok();
    assert!(out.contains("dead 1"), "{out}");
    // No waiting: the process has exited, so the alert was sent before it did.
    let got = alerts.requests();
    assert_eq!(got.len(), 1, "the alert was sent before the relay exited");
    assert!(
        got[0].verified(),
        "the core verifier accepts the alert's signature: {:?}",
        got[0].signature
    );
    let body: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["type"], "outbox.dead_letters");
    assert_eq!(body["data"]["count"], 1);
    // The same through the flag, checked by a receiver holding another secret: rejected.
    let wrong = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![WebhookSecret::generate(&OsEntropy)]);
    // The first endpoint is disabled by its 410: a fresh one for the second message.
    let second = gone_endpoint(s).await;
    outbox(&[
        "enqueue",
        "--store",
        s,
        "--topic",
        "order.created",
        "--data",
        "{\"n\":2}",
    ])
    .ok();
    outbox(&[
        "relay",
        "--store",
        s,
        "--until-idle",
        "--allow-http",
        "--allow-private",
        "--dead-letter-webhook",
        &wrong.url(),
        "--alert-secret",
        &secret.expose(),
    ])
    .ok();
    let got = wrong.requests();
    assert_eq!(got.len(), 1);
    assert!(
        matches!(got[0].signature, Some(Err(_))),
        "signed, by our secret only"
    );
    assert!(got[0].header("webhook-signature").is_some());
    assert_eq!((endpoint.count(), second.count()), (1, 1));
}

/// A receiver answering 410, added as an endpoint of the store.
async fn gone_endpoint(s: &str) -> WebhookReceiver {
    let r = WebhookReceiver::start().await.unwrap();
    r.refuse(410);
    outbox(&[
        "endpoints",
        "add",
        "--store",
        s,
        "--url",
        &r.url(),
        "--allow-http",
        "--allow-private",
    ])
    .ok();
    r
}

#[test]
fn a_bad_alert_secret_is_refused_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let r = outbox(&[
        "relay",
        "--store",
        s,
        "--until-idle",
        "--dead-letter-webhook",
        "https://alerts.example/hook",
        "--alert-secret",
        "hunter2-not-a-secret",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--alert-secret"), "{}", r.stderr);
    assert!(!r.stderr.contains("hunter2"), "{}", r.stderr);
    let r = outbox(&[
        "relay",
        "--store",
        s,
        "--until-idle",
        "--alert-secret",
        &WebhookSecret::generate(&OsEntropy).expose(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("needs --dead-letter-webhook"),
        "{}",
        r.stderr
    );
}
