//! `outbox relay --otlp-endpoint` (issue 37): a span per delivery attempt reaches a local
//! OTLP/HTTP receiver that decodes the protobuf it gets, joined to the trace of the
//! `traceparent` stored with the message, with its outcome; the spans of the last attempts
//! are sent when the relay stops on SIGTERM. And `outbox_endpoint_failed_attempts_total`
//! counts the failed attempts of the failing endpoint only. SQLite, loopback only.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span};
use outboxkit_core::{
    AeadVault, DeliveryId, Ledger, NewMessage, OsEntropy, Store, SystemClock, TenantId, Traceparent,
};
use outboxkit_dispatch::{EndpointAdmin, NewEndpoint};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::WebhookReceiver;
use prost::Message;

use crate::observability::{described_families, get, promtool_check, sample};
use crate::{outbox, outbox_cmd, sqlite_url, VAULT_KEY};

const TP_OK: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TP_FAIL: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// What the receiver decoded: the resource's `service.name` and the span, per span.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// A local OTLP/HTTP traces receiver on `127.0.0.1:0`: `POST /v1/traces` with an
/// `application/x-protobuf` body decoded as an `ExportTraceServiceRequest`.
async fn otlp_receiver() -> (String, Received, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let spans: Received = Arc::default();
    let problems: Arc<Mutex<Vec<String>>> = Arc::default();
    let (s, p) = (spans.clone(), problems.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (s, p) = (s.clone(), p.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let (s, p) = (s.clone(), p.clone());
                    async move {
                        let path = req.uri().path().to_owned();
                        let method = req.method().clone();
                        let ctype = req
                            .headers()
                            .get("content-type")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let status = match ExportTraceServiceRequest::decode(body) {
                            Ok(export) if path == "/v1/traces" && method == "POST" => {
                                if ctype != "application/x-protobuf" {
                                    p.lock().unwrap().push(format!("content-type {ctype}"));
                                }
                                let mut got = s.lock().unwrap();
                                for rs in export.resource_spans {
                                    let service = rs
                                        .resource
                                        .as_ref()
                                        .and_then(|r| string_attr(&r.attributes, "service.name"))
                                        .unwrap_or_default();
                                    for ss in rs.scope_spans {
                                        for span in ss.spans {
                                            got.push((service.clone(), span));
                                        }
                                    }
                                }
                                200
                            }
                            other => {
                                p.lock()
                                    .unwrap()
                                    .push(format!("{method} {path}: {:?}", other.err()));
                                400
                            }
                        };
                        let mut r = hyper::Response::new(Full::new(Bytes::new()));
                        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                        r.headers_mut().insert(
                            "content-type",
                            hyper::header::HeaderValue::from_static("application/x-protobuf"),
                        );
                        Ok::<_, Infallible>(r)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (format!("http://{addr}"), spans, problems)
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key)? {
        any_value::Value::IntValue(i) => Some(*i),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_exports_a_span_per_attempt_joined_to_the_stored_trace_and_counts_failures() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &url]).ok();
    let store = SqliteStore::open(
        SqliteConfig::new(dir.path().join("outbox.sqlite")),
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .await
    .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let vault = Arc::new(AeadVault::from_hex(VAULT_KEY, Arc::new(OsEntropy)).unwrap());
    let admin = EndpointAdmin::new(
        shared.clone(),
        vault,
        Arc::new(SystemClock),
        Arc::new(OsEntropy),
    )
    .with_url_policy(Arc::new(outboxkit_core::AnyUrl));
    let tenant = TenantId::default();
    let receiver = WebhookReceiver::start().await.unwrap();
    let (good, secret) = admin
        .create(
            &tenant,
            NewEndpoint {
                url: receiver.url(),
                filter: "ok.*".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    receiver.set_secrets(vec![secret]);
    // A loopback port nothing listens on: the attempt is refused, and retried later.
    let closed = format!("127.0.0.1:{}", crate::free_port());
    let (bad, _) = admin
        .create(
            &tenant,
            NewEndpoint {
                url: format!("http://{closed}/hook"),
                filter: "fail.*".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (ok_tp, fail_tp) = (
        Traceparent::parse(TP_OK).unwrap(),
        Traceparent::parse(TP_FAIL).unwrap(),
    );
    shared
        .enqueue(NewMessage::new("ok.created", serde_json::json!({"i": 1})).traceparent(&ok_tp))
        .await
        .unwrap();
    shared
        .enqueue(NewMessage::new("fail.created", serde_json::json!({"i": 2})).traceparent(&fail_tp))
        .await
        .unwrap();

    let (collector, spans, problems) = otlp_receiver().await;
    let metrics_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut child = outbox_cmd()
        .args([
            "relay",
            "--store",
            &url,
            "--allow-http",
            "--allow-private",
            "--poll-interval",
            "100ms",
            "--metrics-addr",
            &metrics_addr,
        ])
        .env("OUTBOX_OTLP_ENDPOINT", &collector)
        .env("OUTBOX_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let failed_sample = format!(
        "outbox_endpoint_failed_attempts_total{{endpoint=\"{}\"}}",
        bad.id
    );
    let succeeded = r#"outbox_attempts_total{channel="webhook",outcome="succeeded"}"#;
    let retried = r#"outbox_attempts_total{channel="webhook",outcome="retry"}"#;
    // On a task, so that a failed assertion still stops the relay below.
    let addr = metrics_addr.clone();
    let (fs, good_id) = (failed_sample.clone(), good.id.to_string());
    let waited = tokio::spawn(async move {
        assert!(
            receiver.wait_for(1, Duration::from_secs(60)).await,
            "delivered"
        );
        let mut text = String::new();
        for _ in 0..600 {
            if let Some((200, body)) = get(&addr, "/metrics").await {
                text = body;
                if sample(&text, succeeded) >= 1.0 && sample(&text, retried) >= 1.0 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(sample(&text, &fs) >= 1.0, "{text}");
        assert_eq!(sample(&text, &fs), sample(&text, retried), "{text}");
        assert!(
            !text.contains(&format!("endpoint=\"{good_id}\"")),
            "the endpoint that answers has no failures: {text}"
        );
        assert!(
            described_families(&text).contains(&"outbox_endpoint_failed_attempts_total".to_owned())
        );
        promtool_check(&text);
    })
    .await;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut status = None;
    for _ in 0..600 {
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
    if let Err(e) = waited {
        eprintln!("{stderr}");
        std::panic::resume_unwind(e.into_panic());
    }
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "a clean exit on SIGTERM: {stderr}"
    );
    assert!(
        stderr.contains("exporting a span per delivery attempt over OTLP/HTTP"),
        "{stderr}"
    );
    assert!(problems.lock().unwrap().is_empty(), "{:?}", problems.lock());

    // The export is flushed before the relay exits: every attempt's span is here.
    let spans = spans.lock().unwrap().clone();
    let mut by_topic: BTreeMap<String, Vec<&Span>> = BTreeMap::new();
    for (service, span) in &spans {
        assert_eq!(service, "outbox-relay");
        let topic = string_attr(&span.attributes, "outbox.topic").expect("outbox.topic");
        by_topic.entry(topic).or_default().push(span);
    }
    let ok = &by_topic
        .get("ok.created")
        .expect("the delivered message's span")[..];
    let fail = &by_topic
        .get("fail.created")
        .expect("the failing message's spans")[..];
    for (spans, tp, endpoint) in [(ok, &ok_tp, &good.id), (fail, &fail_tp, &bad.id)] {
        let delivery: DeliveryId = string_attr(&spans[0].attributes, "outbox.delivery_id")
            .unwrap()
            .parse()
            .unwrap();
        let d = shared.get_delivery(&tenant, delivery).await.unwrap();
        assert_eq!(
            spans.len(),
            d.attempts as usize,
            "a span per attempt: {spans:#?}"
        );
        let mut attempts: Vec<i64> = spans
            .iter()
            .map(|s| int_attr(&s.attributes, "outbox.attempt").unwrap())
            .collect();
        attempts.sort_unstable();
        assert_eq!(attempts, (1..=i64::from(d.attempts)).collect::<Vec<_>>());
        for s in spans {
            assert_eq!(
                hex(&s.trace_id),
                tp.trace_id(),
                "joins the producer's trace"
            );
            assert_eq!(
                hex(&s.parent_span_id),
                tp.parent_id(),
                "a child of its span"
            );
            assert_ne!(hex(&s.span_id), tp.parent_id());
            assert_eq!(s.name, format!("outbox.deliver {}", d.topic));
            assert_eq!(s.kind, SpanKind::Client as i32);
            assert!(s.start_time_unix_nano > 0 && s.end_time_unix_nano >= s.start_time_unix_nano);
            assert_eq!(
                string_attr(&s.attributes, "outbox.delivery_id"),
                Some(delivery.to_string())
            );
            assert_eq!(
                string_attr(&s.attributes, "outbox.message_id"),
                Some(d.message_id.to_string())
            );
            assert_eq!(
                string_attr(&s.attributes, "outbox.channel").as_deref(),
                Some("webhook")
            );
            assert_eq!(
                string_attr(&s.attributes, "outbox.endpoint_id"),
                Some(endpoint.to_string())
            );
        }
    }
    let ok = ok[0];
    assert_eq!(
        string_attr(&ok.attributes, "outbox.outcome").as_deref(),
        Some("succeeded")
    );
    assert_eq!(
        int_attr(&ok.attributes, "http.response.status_code"),
        Some(200)
    );
    let ok_status = ok.status.clone().unwrap_or_default();
    assert_ne!(ok_status.code, StatusCode::Error as i32, "{ok:#?}");
    for s in fail {
        assert_eq!(
            string_attr(&s.attributes, "outbox.outcome").as_deref(),
            Some("retry")
        );
        assert_eq!(
            string_attr(&s.attributes, "outbox.error_class").as_deref(),
            Some("network")
        );
        assert_eq!(int_attr(&s.attributes, "http.response.status_code"), None);
        let status = s.status.clone().unwrap_or_default();
        assert_eq!(status.code, StatusCode::Error as i32, "{s:#?}");
        assert_eq!(status.message, "network");
    }
    // Nothing but ids, the topic and outcomes: no URL, no payload.
    let text = format!("{spans:?}");
    assert!(!text.contains(&closed.to_string()), "{text}");
    assert!(!text.contains("\"i\""), "{text}");
}

#[test]
fn a_bad_otlp_endpoint_is_refused_before_the_relay_starts() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &url]).ok();
    let r = outbox(&[
        "relay",
        "--store",
        &url,
        "--otlp-endpoint",
        "collector:4318",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("invalid input: --otlp-endpoint"),
        "{}",
        r.stderr
    );
    // The same from the environment and from a --config file.
    let from_env = outbox_cmd()
        .args(["relay", "--store", &url])
        .env("OUTBOX_OTLP_ENDPOINT", "ftp://collector/")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&from_env.stderr);
    assert_eq!(from_env.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid input: --otlp-endpoint"),
        "{stderr}"
    );
    let file = dir.path().join("relay.toml");
    std::fs::write(
        &file,
        "[relay]\notlp-endpoint = \"http://collector:4318/?x=1\"\notlp-service-name = \"orders\"\n",
    )
    .unwrap();
    let r = outbox(&["relay", "--store", &url, "--config", file.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("invalid input: --otlp-endpoint"),
        "{}",
        r.stderr
    );
    let help = outbox(&["relay", "--help"]).ok();
    assert!(help.contains("--otlp-endpoint"), "{help}");
    assert!(help.contains("OUTBOX_OTLP_ENDPOINT"), "{help}");
}
