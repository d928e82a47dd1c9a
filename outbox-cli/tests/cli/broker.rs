//! `outbox relay --broker nats://…` publishes to JetStream (the local NATS at
//! 127.0.0.1:4222, or `OUTBOX_TEST_NATS_URL`), into a stream of this test's own.

use std::time::Duration;

use outboxkit_broker::async_nats::jetstream::stream::{Config, StorageType};
use outboxkit_broker::NatsTransport;
use outboxkit_core::{EntropyExt, OsEntropy};

use crate::{outbox, sqlite_url};

/// The NATS of the tests (127.0.0.1:4222, or `OUTBOX_TEST_NATS_URL`) with a fresh memory
/// stream `<prefix>-<random>` over `<stream>.>`: the transport, its URL and the stream; `None` (reported as an unavailable backend)
/// when NATS does not answer.
pub(crate) async fn nats_stream(prefix: &str) -> Option<(NatsTransport, String, String)> {
    let url =
        std::env::var("OUTBOX_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let nats = match NatsTransport::connect(&url).await {
        Ok(t) => t,
        Err(e) => {
            outboxkit_testing::conformance::backend_unavailable::<()>("nats", e).unwrap_or(());
            return None;
        }
    };
    let stream = format!("{prefix}-{:08x}", OsEntropy.next_u64() as u32);
    nats.jetstream()
        .create_stream(Config {
            name: stream.clone(),
            subjects: vec![format!("{stream}.>")],
            storage: StorageType::Memory,
            duplicate_window: Duration::from_secs(60),
            ..Config::default()
        })
        .await
        .unwrap();
    Some((nats, url, stream))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_publishes_to_jetstream_with_a_topic_filter_and_subject_template() {
    let Some((nats, url, stream)) = nats_stream("cli-relay").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let subject = format!("{stream}.{{tenant}}.{{topic}}");
    let relay = |s: &str| {
        outbox(&[
            "relay",
            "--store",
            s,
            "--until-idle",
            "--broker",
            &url,
            "--broker-topics",
            "order.*",
            "--broker-subject",
            &subject,
        ])
        .ok()
    };
    // The first run registers the sink, so later enqueues fan out to it.
    relay(s);
    for (topic, n) in [("order.created", 1), ("order.paid", 2), ("user.created", 3)] {
        outbox(&[
            "enqueue",
            "--store",
            s,
            "--topic",
            topic,
            "--data",
            &format!("{{\"n\":{n}}}"),
        ])
        .ok();
    }
    let report = relay(s);
    assert!(report.contains("succeeded 2"), "{report}");
    let mut st = nats.jetstream().get_stream(&stream).await.unwrap();
    assert_eq!(
        st.info().await.unwrap().state.messages,
        2,
        "user.* is filtered out"
    );
    // The two deliveries have no ordering key, so the relay may publish them in either
    // order: compare the subjects as a set.
    let mut subjects = Vec::new();
    for seq in 1..=2 {
        let m = st.get_raw_message(seq).await.unwrap();
        subjects.push(m.subject.to_string());
    }
    subjects.sort();
    assert_eq!(
        subjects,
        [
            format!("{stream}.default.order.created"),
            format!("{stream}.default.order.paid")
        ]
    );
    let listed = outbox(&["deliveries", "list", "--store", s]).ok();
    assert!(listed.contains("handler:broker"), "{listed}");
    nats.jetstream().delete_stream(&stream).await.unwrap();
}

/// A port on loopback with nothing listening.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `GET path` over HTTP/1.0: the status code and the body (`None` while nothing listens).
async fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: relay\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Some((status, body))
}

/// Kills the child on drop, so a failed assertion never leaves a process behind.
struct Killed(Option<std::process::Child>);

impl Killed {
    /// SIGTERM, wait, and return what it wrote to stderr.
    fn stop(mut self) -> String {
        let mut child = self.0.take().unwrap();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        for _ in 0..200 {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A relay whose broker is down at start starts anyway: webhooks deliver, `/readyz` and the
/// log say the sink is unavailable, and (NATS, on a server of this test's own started
/// later) it connects when the broker comes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_starts_with_its_broker_down_reports_it_in_readyz_and_still_delivers_webhooks() {
    for kind in ["amqp", "nats"] {
        let port = closed_port();
        let broker = match kind {
            "amqp" => format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
            _ => format!("nats://127.0.0.1:{port}"),
        };
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_url(dir.path());
        let s = store.as_str();
        outbox(&["migrate", "--store", s]).ok();
        let receiver = outboxkit_testing::WebhookReceiver::start().await.unwrap();
        outbox(&[
            "endpoints",
            "add",
            "--store",
            s,
            "--url",
            &receiver.url(),
            "--allow-http",
            "--allow-private",
        ])
        .ok();
        for n in 0..3 {
            outbox(&[
                "enqueue",
                "--store",
                s,
                "--topic",
                "order.created",
                "--data",
                &format!("{{\"n\":{n}}}"),
            ])
            .ok();
        }
        let addr = format!("127.0.0.1:{}", closed_port());
        let relay = Killed(Some(
            crate::outbox_cmd()
                .args([
                    "relay",
                    "--store",
                    s,
                    "--allow-http",
                    "--allow-private",
                    "--poll-interval",
                    "100ms",
                    "--metrics-addr",
                    &addr,
                    "--broker",
                    &broker,
                ])
                .env("OUTBOX_LOG", "info")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        ));
        assert!(
            receiver.wait_for(3, Duration::from_secs(30)).await,
            "{kind}: webhooks deliver while the broker is down"
        );
        let mut ready = None;
        for _ in 0..200 {
            ready = get(&addr, "/readyz").await;
            if ready.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (code, body) = ready.expect("/readyz answers");
        assert_eq!(code, 503, "{kind}: {body}");
        assert!(
            body.contains("the broker sink broker is unavailable"),
            "{kind}: {body}"
        );
        if kind == "nats" {
            // The broker comes up: the relay connects by itself and is ready.
            let store_dir = tempfile::tempdir().unwrap();
            let server = Killed(Some(
                std::process::Command::new("nats-server")
                    .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
                    .arg(store_dir.path())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("nats-server runs"),
            ));
            let mut last = None;
            for _ in 0..300 {
                last = get(&addr, "/readyz").await;
                if last.as_ref().is_some_and(|r| r.0 == 200) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert_eq!(last.map(|r| r.0), Some(200), "ready once nats is up");
            drop(server);
        }
        let log = relay.stop();
        assert!(
            log.contains("the broker sink is unavailable"),
            "{kind}: the log says so: {log}"
        );
        assert!(!log.contains("guest:guest"), "no credentials in the log");
    }
}
