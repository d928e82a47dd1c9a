//! Part 6, **Secrets.** Webhooks (some answered with 500, 429, 401, a reset or a stall) and
//! e-mails (some refused) are delivered while every log line is captured:
//!
//! - `relay::*` runs `outbox relay` with `OUTBOX_LOG=debug` (every crate's debug events:
//!   sqlx, hyper, reqwest, redis, the dispatcher) and reads its stdout and stderr; the secret
//!   is rotated in the middle with `outbox endpoints rotate-secret`;
//! - `relay_json::*` does the same with `--log-format json` (every log line must be one JSON
//!   object, without ANSI codes) and `--metrics-addr`, and checks the `/metrics` and
//!   `/readyz` bodies too;
//! - `in_process::*` runs the dispatcher, `EndpointAdmin` and malformed calls in-process
//!   under a `tracing_subscriber` that writes every debug event into a buffer (a
//!   current-thread runtime, so every task's events reach it), and also keeps the text of
//!   every error returned (with its source chain).
//!
//! No line and no error may contain a signing secret (the `whsec_…` text or its base64
//! part, current or rotated), the vault key, the mail API key, a payload or header marker,
//! an e-mail address, or a token carried in the endpoint URL's path and query. Each check
//! also requires the capture to be non-trivial, so it cannot pass on an empty log.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{NewMessage, RetryPolicy, TenantPolicy, WebhookSecret};
use outboxkit_dispatch::{Dispatcher, DispatcherConfig, NewEndpoint};
use outboxkit_http::{EgressPolicy, HttpMailer, HttpMailerConfig, HttpTransport};
use outboxkit_testing::{Reply, WebhookReceiver};

use crate::audit::wait_drained;
use crate::backend::{Backend, Kind};
use crate::bad_input_cli::outbox;
use crate::relay::{fast_flags, Relay};

/// Everything that must never be logged, with a name for the failure message.
struct Secrets {
    items: Vec<(&'static str, String)>,
}

impl Secrets {
    fn add_secret(&mut self, s: &WebhookSecret) {
        let text = s.expose();
        let b64 = text.trim_start_matches("whsec_").to_owned();
        self.items.push(("a whsec_ secret", text));
        self.items
            .push(("a secret's base64", b64.trim_end_matches('=').to_owned()));
    }

    /// Panic at the first `text` line holding a secret (named, not printed).
    fn check(&self, what: &str, text: &str) {
        for (n, line) in text.lines().enumerate() {
            for (name, value) in &self.items {
                assert!(
                    !line.contains(value.as_str()),
                    "{what}, line {}: {name} appears ({} chars into the line)",
                    n + 1,
                    line.find(value.as_str()).unwrap_or(0)
                );
            }
        }
    }
}

/// A payload carrying `marker`, readable as an e-mail (`subject`, `text`).
fn message(i: u32, marker: &str, email: &str) -> NewMessage {
    let text = format!("{marker} {i}");
    let m = NewMessage::new(
        "rel.secret",
        serde_json::json!({ "subject": "hello", "text": text, "marker": marker }),
    )
    .header("x-trace", format!("{marker}-header"));
    if i.is_multiple_of(2) {
        m.email(email)
    } else {
        m
    }
}

struct Setup {
    hooks: WebhookReceiver,
    mail: WebhookReceiver,
    secrets: Secrets,
    endpoint: outboxkit_core::EndpointId,
    url: String,
    mail_key: String,
    total: u64,
}

/// Receivers with faults, an endpoint whose URL carries a token, 20 messages (10 with an
/// e-mail), and the list of what must not leak.
async fn setup(b: &Backend) -> Setup {
    let hooks = WebhookReceiver::start().await.expect("start the receiver");
    let mail = WebhookReceiver::start().await.expect("start the mail api");
    let token = crate::marker("URLTOKEN");
    let url = hooks.url_for(&format!("/hook/{token}?token={token}"));
    let (endpoint, secret) = b.endpoint(&url).await;
    hooks.set_secrets(vec![secret.clone()]);
    hooks.script([
        Reply::Status(500),
        Reply::RetryAfter(429, "1".into()),
        Reply::Reset,
        Reply::Status(401),
        Reply::StallAfterHeaders(200),
        Reply::Status(401),
    ]);
    mail.script([Reply::Status(400), Reply::Status(500)]);
    let payload = crate::marker("PAYLOAD");
    let local = crate::marker("person");
    let email = format!("{local}@example.org");
    let mail_key = crate::marker("MAILKEY");
    for i in 0..20 {
        b.store
            .enqueue(message(i, &payload, &email))
            .await
            .expect("enqueue");
    }
    let mut secrets = Secrets { items: Vec::new() };
    secrets.add_secret(&secret);
    secrets.items.extend([
        ("the payload marker", payload),
        ("the e-mail address", email),
        ("the e-mail's local part", local),
        ("the mail api key", mail_key.clone()),
        ("the vault key", b.vault_key.clone()),
        ("the url token", token),
    ]);
    Setup {
        hooks,
        mail,
        secrets,
        endpoint,
        url,
        mail_key,
        total: 30,
    }
}

/// `GET path` on `addr` over HTTP/1.0: the status code and the body.
async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the metrics address");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: relay\r\n\r\n").as_bytes())
        .await
        .expect("send the request");
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .await
        .expect("read the answer");
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// A loopback address with a port free at the time of the call.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").to_string()
}

async fn relay_scenario(kind: Kind) {
    relay_scenario_as(kind, false).await;
}

async fn relay_scenario_as(kind: Kind, json: bool) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!(
        "secrets/relay{}/{}",
        if json { "_json" } else { "" },
        kind.name()
    );
    let mut s = setup(&b).await;
    let mut flags = fast_flags();
    flags.extend([
        "--retry-schedule".to_owned(),
        "100ms,200ms,300ms,400ms,500ms".to_owned(),
        "--mail-url".to_owned(),
        s.mail.url_for("/send"),
    ]);
    let metrics_addr = free_addr();
    if json {
        flags.extend([
            "--log-format".to_owned(),
            "json".to_owned(),
            "--metrics-addr".to_owned(),
            metrics_addr.clone(),
            "--forward-traceparent".to_owned(),
        ]);
    }
    let mut relay = Relay::spawn(
        &b,
        "relay-debug",
        &flags,
        &[
            ("OUTBOX_LOG", "debug"),
            ("OUTBOX_MAIL_API_KEY", &s.mail_key),
        ],
    );
    assert!(
        s.hooks.wait_for(8, Duration::from_secs(30)).await,
        "[{name}] the relay delivered nothing: {}",
        relay.tail(20)
    );
    let mut rotate = vec!["endpoints".to_owned(), "rotate-secret".to_owned()];
    rotate.extend(b.store_args());
    rotate.push(s.endpoint.to_string());
    let rotated = outbox(&b, &rotate).await;
    assert_eq!(rotated.code, Some(0), "[{name}] rotate-secret: {rotated:?}");
    let fresh = rotated
        .stdout
        .split_whitespace()
        .find(|w| w.starts_with("whsec_"))
        .and_then(|w| WebhookSecret::parse(w).ok())
        .expect("rotate-secret prints the new secret once");
    s.hooks.set_secrets(vec![fresh.clone()]);
    s.secrets.add_secret(&fresh);
    s.secrets
        .check("rotate-secret's error output", &rotated.stderr);

    let (stats, ok) = wait_drained(&*b.store, s.total, Duration::from_secs(60)).await;
    assert!(ok, "[{name}] not drained: {stats:?}\n{}", relay.tail(20));
    if json {
        let (code, metrics) = http_get(&metrics_addr, "/metrics").await;
        assert_eq!(code, 200, "[{name}] /metrics: {metrics}");
        assert!(
            metrics.contains("outbox_attempts_total{channel=\"webhook\",outcome=\"succeeded\"}"),
            "[{name}] /metrics has the delivery counters: {metrics}"
        );
        assert!(
            metrics.contains("outbox_unfinished_deliveries{status=\"pending\"}"),
            "[{name}] {metrics}"
        );
        s.secrets.check(&format!("[{name}] /metrics"), &metrics);
        for path in ["/readyz", "/healthz", "/nothing"] {
            let (_, body) = http_get(&metrics_addr, path).await;
            s.secrets.check(&format!("[{name}] {path}"), &body);
        }
    }
    let status = relay.terminate(Duration::from_secs(10)).await;
    assert!(status.is_some_and(|st| st.success()), "[{name}] {status:?}");
    let out = relay.output();
    assert!(
        out.contains("outbox relay started"),
        "[{name}] no start line"
    );
    assert!(out.contains("DEBUG"), "[{name}] no debug events in the log");
    assert!(
        out.contains("delivery completed"),
        "[{name}] no delivery events"
    );
    assert!(
        out.contains("webhook send failed"),
        "[{name}] no failure events"
    );
    s.secrets.check(&format!("[{name}] relay output"), &out);
    assert!(
        !out.contains('\u{1b}'),
        "[{name}] no ANSI codes off a terminal"
    );
    if json {
        for line in out.lines() {
            // stdout carries the run's report after the log lines.
            if line.starts_with("claimed ") {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("[{name}] a log line that is not JSON ({e}): {line}"));
            assert!(
                v.get("level").is_some() && v.get("fields").is_some(),
                "[{name}] {line}"
            );
        }
    }
    eprintln!(
        "[{name}] {} log lines ({} bytes) at debug from one relay: no secret, payload, \
         e-mail address, key or url token; {} webhook and {} mail requests",
        out.lines().count(),
        out.len(),
        s.hooks.count(),
        s.mail.count()
    );
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

/// The text of an error and of its whole source chain.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(" <- ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

async fn in_process_scenario(kind: Kind, capture: Capture) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("secrets/in-process/{}", kind.name());
    let mut s = setup(&b).await;
    let mut errors = Vec::new();
    let admin = b.admin();
    let given = WebhookSecret::generate(&*b.entropy);
    s.secrets.add_secret(&given);
    let bad_secret = format!("{}!", given.expose());
    let partial = given.expose()[..20].to_owned();
    s.secrets.items.extend([
        ("part of a secret", partial[6..].to_owned()),
        ("a malformed address", "bad\u{7}@example.org".to_owned()),
    ]);
    let attempts: Vec<outboxkit_core::Result<()>> = vec![
        admin
            .create(
                &b.tenant,
                NewEndpoint {
                    url: format!("{}#frag", s.url),
                    ..NewEndpoint::default()
                },
            )
            .await
            .map(|_| ()),
        admin
            .rotate_secret(&b.tenant, s.endpoint, Some(&bad_secret))
            .await
            .map(|_| ()),
        WebhookSecret::parse(&partial).map(|_| ()),
        b.store
            .enqueue(message(98, "x", "bad\u{7}@example.org"))
            .await
            .map(|_| ()),
    ];
    for (i, r) in attempts.into_iter().enumerate() {
        let e = r.expect_err(&format!("[{name}] malformed call {i} must fail"));
        errors.push(chain(&e));
    }
    let rotated = admin
        .rotate_secret(&b.tenant, s.endpoint, Some(&given.expose()))
        .await
        .expect("rotate to a given secret");
    s.hooks.set_secrets(vec![rotated]);

    let egress = EgressPolicy::default().allow_http(true).allow_private(true);
    let mailer = HttpMailer::new(HttpMailerConfig {
        url: s.mail.url_for("/send"),
        api_key: s.mail_key.clone(),
        ..HttpMailerConfig::default()
    })
    .expect("a mailer");
    let config = DispatcherConfig {
        poll_interval: Duration::from_millis(50),
        webhook_timeout: Duration::from_secs(1),
        lease: Duration::from_secs(5),
        held_probe_interval: Duration::from_millis(500),
        ..DispatcherConfig::default()
    };
    let dispatcher = Dispatcher::builder(b.store.clone())
        .config(config)
        .clock(b.clock.clone())
        .webhooks(
            Arc::new(HttpTransport::new(egress).expect("a transport")),
            b.vault.clone(),
        )
        .webhook_policy(TenantPolicy::uniform(
            RetryPolicy::schedule(vec![Duration::from_millis(100); 5]).expect("a schedule"),
        ))
        .mailer(Arc::new(mailer))
        .build()
        .expect("a dispatcher");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        dispatcher
            .run(async move {
                let _ = stopped.await;
            })
            .await
    });
    let (stats, ok) = wait_drained(&*b.store, s.total, Duration::from_secs(60)).await;
    let _ = stop.send(());
    let report = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the dispatcher stops")
        .expect("the dispatcher task")
        .expect("the dispatcher run");
    assert!(ok, "[{name}] not drained: {stats:?}");
    errors.push(format!("{report}"));
    for e in &errors {
        s.secrets.check(&format!("[{name}] an error message"), e);
    }
    let log = capture.text();
    assert!(
        log.contains("delivery completed"),
        "[{name}] no delivery events captured"
    );
    assert!(
        log.contains("webhook send failed"),
        "[{name}] no failure events captured"
    );
    s.secrets.check(&format!("[{name}] the captured log"), &log);
    eprintln!(
        "[{name}] {} captured log lines and {} error messages: no secret, payload, e-mail \
         address, key or url token",
        log.lines().count(),
        errors.len()
    );
}

/// Run the in-process check on a current-thread runtime under a capturing subscriber.
fn in_process(kind: Kind) {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let limit = Duration::from_secs(120);
    rt.block_on(async {
        tokio::time::timeout(limit, in_process_scenario(kind, capture))
            .await
            .expect("the in-process secrets check finishes within 120 s");
    });
}

pub mod relay {
    use super::*;

    #[test]
    fn postgres() {
        crate::run(
            "secrets/relay/postgres",
            Duration::from_secs(120),
            relay_scenario(Kind::Postgres),
        );
    }

    #[test]
    fn sqlite() {
        crate::run(
            "secrets/relay/sqlite",
            Duration::from_secs(120),
            relay_scenario(Kind::Sqlite),
        );
    }

    #[test]
    fn redis() {
        crate::run(
            "secrets/relay/redis",
            Duration::from_secs(120),
            relay_scenario(Kind::Redis),
        );
    }
}

pub mod relay_json {
    use super::*;

    #[test]
    fn postgres() {
        crate::run(
            "secrets/relay_json/postgres",
            Duration::from_secs(120),
            relay_scenario_as(Kind::Postgres, true),
        );
    }

    #[test]
    fn sqlite() {
        crate::run(
            "secrets/relay_json/sqlite",
            Duration::from_secs(120),
            relay_scenario_as(Kind::Sqlite, true),
        );
    }

    #[test]
    fn redis() {
        crate::run(
            "secrets/relay_json/redis",
            Duration::from_secs(120),
            relay_scenario_as(Kind::Redis, true),
        );
    }
}

pub mod in_process {
    use super::*;

    #[test]
    fn postgres() {
        in_process(Kind::Postgres);
    }

    #[test]
    fn sqlite() {
        in_process(Kind::Sqlite);
    }

    #[test]
    fn redis() {
        in_process(Kind::Redis);
    }
}
