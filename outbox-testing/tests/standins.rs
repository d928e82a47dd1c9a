//! The stand-ins: the webhook receiver observed through a raw HTTP/1.1 client, the scripted
//! and faulty transports, the mail stand-in, and the SMTP stand-in (in `standins/smtp.rs`).

use std::time::Duration;

use outboxkit_core::{
    sign, EndpointUrl, ErrorClass, IdempotencyKey, MailErrorCode, MailMessage, MailOutcome, Mailer,
    SignedRequest, VerifyError, WebhookResponse, WebhookSecret, WebhookTransport,
};
use outboxkit_testing::{FaultyTransport, MailStandIn, Reply, ScriptedTransport, WebhookReceiver};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[path = "standins/smtp.rs"]
mod smtp;

const WAIT: Duration = Duration::from_secs(10);

// ---------- a tiny HTTP/1.1 client ----------

struct Client {
    conn: BufReader<TcpStream>,
}

#[derive(Debug)]
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Client {
    async fn connect(receiver: &WebhookReceiver) -> Client {
        let stream = TcpStream::connect(receiver.addr()).await.unwrap();
        Client {
            conn: BufReader::new(stream),
        }
    }

    async fn send(&mut self, path: &str, headers: &[(&str, &str)], body: &[u8]) {
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        let stream = self.conn.get_mut();
        stream.write_all(req.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        stream.flush().await.unwrap();
    }

    /// The status line and headers; `None` when the connection ended first.
    async fn head(&mut self) -> Option<Head> {
        let mut line = String::new();
        match self.conn.read_line(&mut line).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        let status = line.split_whitespace().nth(1)?.parse().ok()?;
        let mut headers = Vec::new();
        loop {
            let mut l = String::new();
            self.conn.read_line(&mut l).await.ok()?;
            let l = l.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':')?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
        Some(Head { status, headers })
    }

    async fn body(&mut self, head: &Head) -> Vec<u8> {
        if let Some(len) = head.header("content-length") {
            let mut body = vec![0u8; len.parse().unwrap()];
            self.conn.read_exact(&mut body).await.unwrap();
            return body;
        }
        assert_eq!(head.header("transfer-encoding"), Some("chunked"));
        let mut body = Vec::new();
        loop {
            let mut size = String::new();
            self.conn.read_line(&mut size).await.unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0u8; size + 2];
            self.conn.read_exact(&mut chunk).await.unwrap();
            if size == 0 {
                return body;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }

    async fn post(&mut self, path: &str, body: &[u8]) -> (Head, Vec<u8>) {
        self.send(path, &[], body).await;
        let head = self.head().await.expect("an answer");
        let body = self.body(&head).await;
        (head, body)
    }
}

async fn post_once(receiver: &WebhookReceiver, body: &[u8]) -> (Head, Vec<u8>) {
    Client::connect(receiver).await.post("/hook", body).await
}

// ---------- the receiver: each reply ----------

#[tokio::test]
async fn status_and_body_replies() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Status(503), Reply::Body(400, "bad field".into())]);
    let (head, body) = post_once(&r, b"{}").await;
    assert_eq!(head.status, 503);
    assert!(body.is_empty());
    let (head, body) = post_once(&r, b"{}").await;
    assert_eq!(head.status, 400);
    assert_eq!(body, b"bad field");
    let (head, _) = post_once(&r, b"{}").await;
    assert_eq!(head.status, 200, "the standing answer after the script");
}

#[tokio::test]
async fn retry_after_and_redirect_headers() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([
        Reply::RetryAfter(429, "7".into()),
        Reply::Redirect(302, "https://example.invalid/elsewhere".into()),
    ]);
    let (head, _) = post_once(&r, b"{}").await;
    assert_eq!((head.status, head.header("retry-after")), (429, Some("7")));
    let (head, _) = post_once(&r, b"{}").await;
    assert_eq!(head.status, 302);
    assert_eq!(
        head.header("location"),
        Some("https://example.invalid/elsewhere")
    );
}

#[tokio::test]
async fn delay_answers_after_the_wait() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Delay(Duration::from_millis(50), 202)]);
    let (head, _) = post_once(&r, b"{}").await;
    assert_eq!(head.status, 202);
    assert_eq!(r.count(), 1);
}

#[tokio::test]
async fn huge_body_is_streamed_whole() {
    let r = WebhookReceiver::start().await.unwrap();
    let len = 3 * 1024 * 1024 + 5;
    r.script([Reply::HugeBody(200, len)]);
    let (head, body) = post_once(&r, b"{}").await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(len.to_string().as_str())
    );
    assert_eq!(body.len(), len);
}

#[tokio::test]
async fn stall_sends_headers_and_never_the_body() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::StallAfterHeaders(200)]);
    let mut c = Client::connect(&r).await;
    c.send("/hook", &[], b"{}").await;
    let head = tokio::time::timeout(WAIT, c.head()).await.unwrap().unwrap();
    assert_eq!(head.status, 200);
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(300), c.conn.read(&mut byte)).await;
    assert!(read.is_err(), "no body byte arrives: {read:?}");
    assert_eq!(r.count(), 1);
}

#[tokio::test]
async fn reset_closes_without_answering_but_records() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Reset]);
    let mut c = Client::connect(&r).await;
    c.send("/hook", &[("webhook-id", "msg_reset")], b"{}").await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(WAIT, c.conn.read_to_end(&mut rest))
        .await
        .unwrap();
    let e = read.expect_err("a reset, not an answer or a clean close");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(rest.is_empty());
    assert_eq!(r.count(), 1);
    assert_eq!(r.requests()[0].webhook_id.as_deref(), Some("msg_reset"));
    // the next connection is served normally
    assert_eq!(post_once(&r, b"{}").await.0.status, 200);
}

#[tokio::test]
async fn keep_alive_serves_many_requests_on_one_connection() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Status(500)]);
    let mut c = Client::connect(&r).await;
    let statuses = [
        c.post("/a", b"1").await.0.status,
        c.post("/b", b"22").await.0.status,
        c.post("/c", b"333").await.0.status,
    ];
    assert_eq!(statuses, [500, 200, 200]);
    assert_eq!(r.connections(), 1);
    post_once(&r, b"{}").await;
    assert_eq!(r.connections(), 2);
    let reqs = r.requests();
    let seen: Vec<(&str, &str, usize)> = reqs
        .iter()
        .map(|q| (q.method.as_str(), q.path.as_str(), q.body.len()))
        .collect();
    assert_eq!(
        seen,
        [
            ("POST", "/a", 1),
            ("POST", "/b", 2),
            ("POST", "/c", 3),
            ("POST", "/hook", 2)
        ]
    );
    assert!(reqs.windows(2).all(|w| w[0].elapsed <= w[1].elapsed));
}

#[tokio::test]
async fn refuse_and_heal_change_the_standing_answer() {
    let r = WebhookReceiver::start().await.unwrap();
    r.refuse(503);
    r.script([Reply::Status(201)]);
    assert_eq!(
        post_once(&r, b"{}").await.0.status,
        201,
        "the script goes first"
    );
    assert_eq!(post_once(&r, b"{}").await.0.status, 503);
    assert_eq!(post_once(&r, b"{}").await.0.status, 503);
    r.heal();
    assert_eq!(post_once(&r, b"{}").await.0.status, 200);
    assert_eq!(r.count(), 4);
}

#[tokio::test]
async fn urls_clones_wait_and_shutdown() {
    let r = WebhookReceiver::start().await.unwrap();
    let port = r.addr().port();
    assert_eq!(r.url(), format!("http://127.0.0.1:{port}/hook"));
    assert_eq!(r.url_for("x/y"), format!("http://127.0.0.1:{port}/x/y"));
    assert_eq!(r.url_for("/z"), format!("http://127.0.0.1:{port}/z"));

    assert!(!r.wait_for(1, Duration::from_millis(20)).await);
    let clone = r.clone();
    let waiter = tokio::spawn(async move { clone.wait_for(2, WAIT).await });
    post_once(&r, b"{}").await;
    post_once(&r, b"{}").await;
    assert!(waiter.await.unwrap());
    assert!(r.wait_for(2, Duration::ZERO).await);

    r.shutdown();
    let mut refused = false;
    for _ in 0..200 {
        if TcpStream::connect(r.addr()).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "the listener closes after shutdown");
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_server() {
    let r = WebhookReceiver::start().await.unwrap();
    let addr = r.addr();
    drop(r);
    let mut refused = false;
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused);
}

// ---------- the receiver: signatures ----------

fn secret(byte: u8) -> WebhookSecret {
    WebhookSecret::from_bytes(vec![byte; 32]).unwrap()
}

fn now_secs() -> i64 {
    use outboxkit_core::Clock;
    outboxkit_core::SystemClock.now().as_unix_seconds()
}

async fn post_signed(r: &WebhookReceiver, secrets: &[&WebhookSecret], ts: i64) {
    let body = br#"{"type":"order.created"}"#;
    let sig = sign(secrets, "msg_1", ts, body);
    let ts = ts.to_string();
    let headers = [
        ("webhook-id", "msg_1"),
        ("webhook-timestamp", ts.as_str()),
        ("webhook-signature", sig.as_str()),
        ("content-type", "application/json"),
    ];
    let mut c = Client::connect(r).await;
    c.send("/hook", &headers, body).await;
    let head = c.head().await.unwrap();
    assert_eq!(head.status, 200);
}

#[tokio::test]
async fn signatures_are_verified_against_any_secret() {
    let (old, new, other) = (secret(1), secret(2), secret(3));
    let r = WebhookReceiver::start().await.unwrap();
    post_signed(&r, &[&new], now_secs()).await;
    assert_eq!(r.requests()[0].signature, None, "no secrets: not checked");

    let r = r.with_secrets(vec![old.clone()]);
    post_signed(&r, &[&old], now_secs()).await;
    post_signed(&r, &[&other], now_secs()).await;
    post_signed(&r, &[&new, &old], now_secs()).await;
    post_signed(&r, &[&old], now_secs() - 3600).await;
    r.set_secrets(vec![new.clone(), other.clone()]);
    post_signed(&r, &[&new, &old], now_secs()).await;

    let sigs: Vec<_> = r
        .requests()
        .into_iter()
        .skip(1)
        .map(|q| q.signature)
        .collect();
    assert_eq!(
        sigs,
        [
            Some(Ok(())),
            Some(Err(VerifyError::Mismatch)),
            Some(Ok(())),
            Some(Err(VerifyError::TooOld)),
            Some(Ok(())),
        ]
    );
    let last = r.requests().pop().unwrap();
    assert!(last.verified());
    assert_eq!(last.webhook_id.as_deref(), Some("msg_1"));
    assert_eq!(last.header("Content-Type"), Some("application/json"));
    assert_eq!(last.text(), r#"{"type":"order.created"}"#);
}

#[tokio::test]
async fn timestamps_can_be_checked_against_a_manual_clock() {
    let clock = outboxkit_testing::ManualClock::new();
    let start = outboxkit_testing::ManualClock::START / 1000;
    let r = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![secret(1)])
        .with_clock(clock.clone());
    post_signed(&r, &[&secret(1)], start).await;
    clock.advance(Duration::from_secs(301));
    post_signed(&r, &[&secret(1)], start).await;
    let sigs: Vec<_> = r.requests().into_iter().map(|q| q.signature).collect();
    assert_eq!(sigs, [Some(Ok(())), Some(Err(VerifyError::TooOld))]);
}

#[tokio::test]
async fn unsigned_requests_fail_verification_with_the_missing_header() {
    let r = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![secret(1)]);
    post_once(&r, b"{}").await;
    assert_eq!(
        r.requests()[0].signature,
        Some(Err(VerifyError::MissingHeader("webhook-id".into())))
    );
}

// ---------- scripted and faulty transports ----------

fn request(n: u8) -> SignedRequest {
    SignedRequest {
        url: EndpointUrl::parse("https://example.invalid/hook").unwrap(),
        headers: vec![("webhook-id".into(), format!("msg_{n}"))],
        body: vec![n],
        timeout: Duration::from_secs(10),
    }
}

fn status(r: &WebhookResponse) -> Option<u16> {
    match r {
        WebhookResponse::Answered { status, .. } => Some(*status),
        WebhookResponse::Failed { .. } => None,
    }
}

#[tokio::test]
async fn scripted_transport_answers_in_order_then_the_default() {
    let t = ScriptedTransport::new();
    let shared = t.clone();
    t.push(WebhookResponse::answered(503, None, ""));
    t.push_many([
        WebhookResponse::answered(429, Some("3".into()), "slow down"),
        WebhookResponse::Failed {
            class: ErrorClass::Timeout,
            detail: "deadline".into(),
        },
    ]);
    let mut got = Vec::new();
    for n in 0..5 {
        got.push(shared.send(request(n)).await);
    }
    assert_eq!(
        got.iter().map(status).collect::<Vec<_>>(),
        [Some(503), Some(429), None, Some(200), Some(200)]
    );
    assert_eq!(
        got[1].outcome(),
        outboxkit_core::Outcome::Http {
            status: 429,
            retry_after: Some("3".into())
        }
    );
    t.set_default(WebhookResponse::answered(410, None, ""));
    assert_eq!(status(&t.send(request(5)).await), Some(410));
    assert_eq!(t.count(), 6);
    let ids: Vec<_> = t
        .requests()
        .iter()
        .map(|r| r.header("webhook-id").unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["msg_0", "msg_1", "msg_2", "msg_3", "msg_4", "msg_5"]);
}

#[tokio::test]
async fn faulty_transport_injects_reproducible_network_faults() {
    let all = FaultyTransport::new(ScriptedTransport::new(), 1).error_ratio(1.0);
    for n in 0..10 {
        let r = all.send(request(n)).await;
        assert!(
            matches!(
                r,
                WebhookResponse::Failed {
                    class: ErrorClass::Network,
                    ..
                }
            ),
            "{r:?}"
        );
    }
    assert_eq!(
        (all.injected(), all.inner().count()),
        (10, 0),
        "the inner is never called"
    );

    let none = FaultyTransport::new(ScriptedTransport::new(), 1)
        .error_ratio(0.0)
        .latency(Duration::from_millis(1));
    for n in 0..10 {
        assert_eq!(status(&none.send(request(n)).await), Some(200));
    }
    assert_eq!((none.injected(), none.inner().count()), (0, 10));

    async fn pattern(seed: u64) -> Vec<bool> {
        let t = FaultyTransport::new(ScriptedTransport::new(), seed).error_ratio(0.5);
        let mut out = Vec::new();
        for n in 0..64 {
            out.push(status(&t.send(request(n)).await).is_none());
        }
        assert_eq!(t.injected() + t.inner().count(), 64);
        out
    }
    let (a, b, c) = (pattern(7).await, pattern(7).await, pattern(8).await);
    assert_eq!(a, b, "the same seed gives the same faults");
    assert_ne!(a, c);
    let faults = a.iter().filter(|f| **f).count();
    assert!((10..=54).contains(&faults), "about half fail: {faults}");
}

// ---------- the mail stand-in ----------

fn mail(n: u8) -> MailMessage {
    MailMessage {
        to: format!("user{n}@example.com"),
        subject: format!("subject {n}"),
        text: "hello".into(),
        html: None,
        reply_to: None,
        from_name: None,
    }
}

fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::new(s).unwrap()
}

#[tokio::test]
async fn a_plain_mailer_sends_twice_and_an_idempotent_one_once() {
    let plain = MailStandIn::new();
    assert!(!plain.capabilities().idempotent);
    plain.send(&mail(1), &key("k1")).await.unwrap();
    plain.send(&mail(1), &key("k1")).await.unwrap();
    assert_eq!(plain.sent().len(), 2);

    let idem = MailStandIn::idempotent();
    let shared = idem.clone();
    assert!(idem.capabilities().idempotent);
    let first = idem.send(&mail(1), &key("k1")).await.unwrap();
    let again = shared.send(&mail(1), &key("k1")).await.unwrap();
    idem.send(&mail(2), &key("k2")).await.unwrap();
    assert_eq!(
        first, again,
        "the duplicate is acknowledged with the same receipt"
    );
    let sent = idem.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        (sent[0].0.subject.as_str(), sent[0].1.as_str()),
        ("subject 1", "k1")
    );
    assert_eq!(
        (sent[1].0.subject.as_str(), sent[1].1.as_str()),
        ("subject 2", "k2")
    );
    assert_eq!(idem.attempts(), 3);
}

#[tokio::test]
async fn refuse_heal_and_availability() {
    let m = MailStandIn::idempotent();
    m.refuse(MailErrorCode::Timeout, MailOutcome::Unknown);
    for _ in 0..2 {
        let e = m.send(&mail(1), &key("k1")).await.unwrap_err();
        assert_eq!(
            (e.code, e.outcome),
            (MailErrorCode::Timeout, MailOutcome::Unknown)
        );
    }
    m.refuse(MailErrorCode::MessageRefused, MailOutcome::NotSent);
    let e = m.send(&mail(1), &key("k1")).await.unwrap_err();
    assert_eq!(e.code, MailErrorCode::MessageRefused);
    assert!(m.sent().is_empty(), "a refused send is not recorded");
    m.heal();
    m.send(&mail(1), &key("k1")).await.unwrap();
    assert_eq!(m.sent().len(), 1);

    assert!(m.available());
    m.set_available(false);
    assert!(!m.available());
    let e = m.send(&mail(2), &key("k2")).await.unwrap_err();
    assert_eq!(
        (e.code, e.outcome),
        (MailErrorCode::Unavailable, MailOutcome::NotSent)
    );
    assert!(!e.to_string().contains("example.com"));
    m.set_available(true);
    assert_eq!(m.attempts(), 5);
    assert_eq!(m.sent().len(), 1);
}
