//! `outbox relay --smtp-url` sends e-mail to the loopback SMTP stand-in; bad SMTP settings
//! stop it at start with exit code 2.

use std::process::Stdio;
use std::time::Duration;

use outboxkit_testing::SmtpStandIn;

use crate::{outbox, outbox_cmd, sqlite_url, Run};

/// Extra environment variables.
type Env = Vec<(&'static str, String)>;

/// `outbox` with `args` and extra environment, off the async runtime.
async fn run(args: Vec<String>, env: Env) -> Run {
    tokio::task::spawn_blocking(move || {
        let out = outbox_cmd()
            .args(&args)
            .env_remove("OUTBOX_SMTP_PASSWORD")
            .envs(env)
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

fn relay_args(store: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["relay", "--store", store, "--poll-interval", "100ms"];
    args.extend_from_slice(extra);
    args.into_iter().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_sends_mail_through_smtp_url() {
    let smtp = SmtpStandIn::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.clone();
    tokio::task::spawn_blocking(move || {
        outbox(&["migrate", "--store", &s]).ok();
        outbox(&[
            "enqueue",
            "--store",
            &s,
            "--topic",
            "invoice.sent",
            "--data",
            r#"{"subject":"Your invoice","text":"Thanks"}"#,
            "--email",
            "ada@example.com",
        ])
        .ok();
    })
    .await
    .unwrap();
    let url = format!("smtp://127.0.0.1:{}?tls=none", smtp.port());
    let mut child = outbox_cmd()
        .args(relay_args(
            &store,
            &["--smtp-url", &url, "--smtp-from", "noreply@example.com"],
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sent = false;
    for _ in 0..600 {
        if !smtp.messages().is_empty() {
            sent = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut status = None;
    for _ in 0..300 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(sent, "the relay sent the mail: {stderr}");
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{stderr}");
    let got = smtp.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].to, vec!["ada@example.com".to_owned()]);
    assert_eq!(got[0].from, "noreply@example.com");
    assert!(got[0].message_id().unwrap().starts_with("<outbox-"));
    assert!(!stderr.contains("ada@example.com"), "no address in logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_smtp_settings_exit_2_before_sending() {
    // A server that offers no STARTTLS: the start-up check refuses to go on in clear.
    let smtp = SmtpStandIn::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.clone();
    tokio::task::spawn_blocking(move || outbox(&["migrate", "--store", &s]).ok())
        .await
        .unwrap();
    let plain = format!("smtp://app@127.0.0.1:{}", smtp.port());
    let from = ["--smtp-from", "noreply@example.com"];
    let cases: Vec<(&str, Vec<String>, Env, &str)> = vec![
        (
            "both mailers",
            relay_args(
                &store,
                &[
                    "--smtp-url",
                    &plain,
                    "--mail-url",
                    "https://mail.example.com/send",
                ],
            ),
            vec![],
            "--mail-url",
        ),
        (
            "password in the url",
            relay_args(
                &store,
                &[
                    &["--smtp-url", "smtp://app:hunter2@mail.example.com"][..],
                    &from,
                ]
                .concat(),
            ),
            vec![],
            "OUTBOX_SMTP_PASSWORD",
        ),
        (
            "a user without a password",
            relay_args(&store, &[&["--smtp-url", &plain][..], &from].concat()),
            vec![],
            "OUTBOX_SMTP_PASSWORD",
        ),
        (
            "no sender",
            relay_args(&store, &["--smtp-url", &plain]),
            vec![],
            "--smtp-from",
        ),
        (
            "starttls not offered",
            relay_args(&store, &[&["--smtp-url", &plain][..], &from].concat()),
            vec![("OUTBOX_SMTP_PASSWORD", "hunter2".to_owned())],
            "refused",
        ),
        (
            "credentials in clear",
            relay_args(
                &store,
                &[&["--smtp-url", &format!("{plain}?tls=none")][..], &from].concat(),
            ),
            vec![("OUTBOX_SMTP_PASSWORD", "hunter2".to_owned())],
            "security",
        ),
    ];
    for (name, args, env, says) in cases {
        let r = run(args, env).await;
        assert_eq!(r.code, 2, "{name}: {r:?}");
        assert!(r.stderr.contains(says), "{name}: {}", r.stderr);
        assert!(!r.stderr.contains("hunter2"), "{name}: {}", r.stderr);
    }
    assert_eq!(smtp.data_commands(), 0);
}

#[test]
fn relay_help_documents_both_mailers() {
    let help = outbox(&["relay", "--help"]).ok();
    assert!(help.contains("--mail-url") && help.contains("--smtp-url"));
    assert!(help.contains("OUTBOX_SMTP_PASSWORD"));
}
