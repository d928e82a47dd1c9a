//! `send_detailed`: the attempt in full, against a loopback HTTP server that answers with
//! scripted raw bytes (binary bodies, repeated headers) and the `WebhookReceiver`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::model::{REDACTED, RESPONSE_BODY_CAP_DEFAULT};
use outboxkit_core::{AttemptDetail, ErrorClass, WebhookTransport};
use outboxkit_http::{HttpTransport, HttpTransportConfig};
use outboxkit_testing::{Reply, WebhookReceiver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// An HTTP/1.1 server on loopback answering each request with the next scripted raw
/// answer, keeping connections open; it records the head of every request it read.
struct RawServer {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl RawServer {
    async fn start(answers: Vec<Vec<u8>>) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let h = heads.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, answers.clone(), h.clone()));
            }
        });
        RawServer { addr, heads }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

async fn serve(
    mut conn: tokio::net::TcpStream,
    answers: Arc<Mutex<VecDeque<Vec<u8>>>>,
    heads: Arc<Mutex<Vec<String>>>,
) {
    let mut buf = Vec::new();
    loop {
        // One request: the head, then content-length bytes of body.
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        while buf.len() < end + length {
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..end + length);
        heads.lock().unwrap().push(head);
        let answer = answers.lock().unwrap().pop_front();
        let Some(answer) = answer else { return };
        if conn.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// A raw answer: status line, the headers as given, `content-length`, the body.
fn answer(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n").into_bytes();
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

fn capped(cap: usize) -> HttpTransport {
    HttpTransport::with_config(
        loopback_policy(),
        HttpTransportConfig {
            response_body_cap: cap,
            ..HttpTransportConfig::default()
        },
    )
    .unwrap()
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn the_attempt_is_kept_in_full_headers_in_order_and_a_binary_body() {
    let binary: Vec<u8> = vec![0, 159, 146, 150, b'\n', 0x1b, b'[', b'2', b'J', 0xff];
    let server = RawServer::start(vec![
        answer(
            "202 Accepted",
            &[
                ("content-type", "application/octet-stream"),
                ("x-trace", "a"),
                ("x-trace", "b"),
            ],
            &binary,
        ),
        answer("200 OK", &[], b"again"),
    ])
    .await;
    let t = loopback_transport();
    let key = secret(7);
    let mut request = signed(&server.url(), &[&key], br#"{"n":1}"#, WAIT);
    request
        .headers
        .push(("authorization".into(), "Bearer s3cr3t-token".into()));
    request.headers.push(("x-route".into(), "eu".into()));
    let signature = request.header("webhook-signature").unwrap().to_owned();
    let sent = t.send_detailed(request).await;
    assert_eq!(status(&sent.response), Some(202), "{:?}", sent.response);
    let d = sent.detail.expect("a detail");
    let names: Vec<&str> = d.request_headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
            "authorization",
            "x-route",
            "content-type",
            "content-length",
            "user-agent"
        ]
    );
    assert_eq!(
        header(&d.request_headers, "webhook-signature"),
        Some(signature.as_str())
    );
    assert_eq!(header(&d.request_headers, "authorization"), Some(REDACTED));
    assert_eq!(header(&d.request_headers, "x-route"), Some("eu"));
    assert_eq!(header(&d.request_headers, "content-length"), Some("7"));
    // The receiver got the real value: only the record is redacted.
    let heads = server.heads();
    assert!(
        heads[0].contains("authorization: Bearer s3cr3t-token"),
        "{}",
        heads[0]
    );
    assert_eq!(
        d.response_headers,
        vec![
            (
                "content-type".to_owned(),
                "application/octet-stream".to_owned()
            ),
            ("x-trace".to_owned(), "a".to_owned()),
            ("x-trace".to_owned(), "b".to_owned()),
            ("content-length".to_owned(), binary.len().to_string()),
        ]
    );
    assert_eq!(d.response_body, binary, "byte for byte");
    assert!(!d.response_body_truncated);
    assert_eq!(d.remote_addr, Some(server.addr.to_string()));
    assert!(d.timing.first_byte.is_some());
    assert!(
        d.timing.connect.is_some(),
        "this attempt opened the connection"
    );
    // The same connection again: nothing to open.
    let again = t
        .send_detailed(signed(&server.url(), &[&key], b"{}", WAIT))
        .await
        .detail
        .unwrap();
    assert_eq!(again.response_body, b"again");
    assert_eq!(again.timing.connect, None, "a reused connection");
    assert!(again.timing.first_byte.is_some());
    assert_eq!(server.heads().len(), 2);
}

#[tokio::test]
async fn the_body_is_cut_at_the_configured_cap() {
    let long = vec![b'x'; 1000];
    let exact = vec![b'y'; 100];
    let server = RawServer::start(vec![
        answer("500 Internal Server Error", &[], &long),
        answer("200 OK", &[], &exact),
    ])
    .await;
    let t = capped(100);
    let d = t
        .send_detailed(plain(&server.url(), WAIT))
        .await
        .detail
        .unwrap();
    assert_eq!(d.response_body, vec![b'x'; 100]);
    assert!(d.response_body_truncated);
    let d = t
        .send_detailed(plain(&server.url(), WAIT))
        .await
        .detail
        .unwrap();
    assert_eq!(d.response_body, exact);
    assert!(!d.response_body_truncated, "exactly the cap is whole");
}

#[tokio::test]
async fn the_default_cap_is_16_kib_and_a_larger_answer_keeps_its_excerpt() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::HugeBody(200, 10 * 1024 * 1024)]);
    let sent = loopback_transport()
        .send_detailed(plain(&r.url(), WAIT))
        .await;
    let d = sent.detail.unwrap();
    assert_eq!(d.response_body.len(), RESPONSE_BODY_CAP_DEFAULT);
    assert!(d.response_body_truncated);
    assert!(sent.response.excerpt().len() <= 300);
}

#[tokio::test]
async fn a_refused_connection_keeps_the_request_and_no_response() {
    let port = closed_port().await;
    let sent = loopback_transport()
        .send_detailed(signed(
            &format!("http://127.0.0.1:{port}/hook"),
            &[&secret(1)],
            b"{}",
            WAIT,
        ))
        .await;
    assert_eq!(failure(&sent.response), Some(ErrorClass::Network));
    let d = sent.detail.expect("what was tried is kept");
    assert!(header(&d.request_headers, "webhook-signature").is_some());
    assert_eq!(
        (
            d.timing.first_byte,
            d.timing.connect,
            d.remote_addr.as_deref()
        ),
        (None, None, None)
    );
    assert!(d.response_headers.is_empty() && d.response_body.is_empty());
}

#[tokio::test]
async fn a_redirect_is_kept_with_its_location() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Redirect(302, r.url_for("/elsewhere"))]);
    let sent = loopback_transport()
        .send_detailed(plain(&r.url(), WAIT))
        .await;
    assert_eq!(status(&sent.response), Some(302));
    let d = sent.detail.unwrap();
    assert_eq!(
        header(&d.response_headers, "location"),
        Some(r.url_for("/elsewhere").as_str())
    );
    assert_eq!(r.count(), 1, "not followed");
}

#[tokio::test]
async fn a_refused_url_was_never_sent_and_keeps_no_detail() {
    let sent = HttpTransport::new(outboxkit_http::EgressPolicy::default())
        .unwrap()
        .send_detailed(plain("http://127.0.0.1:9/hook", WAIT))
        .await;
    assert_eq!(failure(&sent.response), Some(ErrorClass::EgressRefused));
    assert_eq!(sent.detail, None::<Box<AttemptDetail>>);
}

#[tokio::test]
async fn a_stall_after_the_headers_keeps_the_headers_and_times_out() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::StallAfterHeaders(200)]);
    let sent = loopback_transport()
        .send_detailed(plain(&r.url(), Duration::from_millis(300)))
        .await;
    assert_eq!(failure(&sent.response), Some(ErrorClass::Timeout));
    let d = sent.detail.unwrap();
    assert!(d.timing.first_byte.is_some(), "the headers arrived");
    assert!(!d.response_headers.is_empty());
}

#[test]
fn a_cap_above_64_kib_is_refused() {
    let e = HttpTransport::with_config(
        loopback_policy(),
        HttpTransportConfig {
            response_body_cap: 65_537,
            ..HttpTransportConfig::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.field(), Some("response_body_cap"), "{e}");
    assert!(capped(65_536).config().response_body_cap == 65_536);
}
