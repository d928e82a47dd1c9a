//! `outbox listen` answers like a careful receiver: 2xx only to a valid signature.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

use outboxkit_core::{sign, Clock, SystemClock, WebhookSecret};

use crate::outbox_cmd;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Start `outbox listen --port 0 …` and return it with the port it printed.
fn listen(extra: &[&str]) -> (Child, u16) {
    let mut child = outbox_cmd()
        .args(["listen", "--port", "0", "--secret", SECRET, "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let port = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, port)
}

/// Send one raw HTTP/1.1 request and return the status code.
fn send(port: u16, method: &str, headers: &[(&str, String)], body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "{method} /hook HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\ncontent-type: application/json\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // The server may answer 413 before reading an oversized body; a reset then is fine.
    let _ = s.write_all(body);
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    let answer = String::from_utf8_lossy(&bytes);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

fn signed(id: &str, ts: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    let secret = WebhookSecret::parse(SECRET).unwrap();
    vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", sign(&[&secret], id, ts, body)),
    ]
}

fn now() -> i64 {
    SystemClock.now().as_unix_seconds()
}

fn finish(child: Child) -> Vec<serde_json::Value> {
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn listen_answers_2xx_only_to_a_valid_signature() {
    let (child, port) = listen(&["--count", "8", "--max-body", "1024"]);
    let body = br#"{"type":"order.created","data":{"id":1}}"#;
    let ts = now();
    let mut tampered = signed("msg_2", ts, body);
    tampered[2].1 = signed("msg_2", ts, b"{}")[2].1.clone();
    let stale = now() - 3600;
    let cases: Vec<(&str, u16, u16)> = vec![
        (
            "valid",
            send(port, "POST", &signed("msg_1", ts, body), body),
            200,
        ),
        ("tampered", send(port, "POST", &tampered, body), 401),
        (
            "missing signature",
            send(port, "POST", &signed("msg_3", ts, body)[..2], body),
            401,
        ),
        ("GET", send(port, "GET", &[], b""), 405),
        (
            "oversized",
            send(
                port,
                "POST",
                &signed("msg_4", ts, &[b'x'; 4096]),
                &[b'x'; 4096],
            ),
            413,
        ),
        (
            "stale timestamp",
            send(port, "POST", &signed("msg_5", stale, body), body),
            400,
        ),
        (
            "future timestamp",
            send(port, "POST", &signed("msg_6", now() + 3600, body), body),
            400,
        ),
        (
            "malformed timestamp",
            send(
                port,
                "POST",
                &[
                    ("webhook-id", "msg_7".to_owned()),
                    ("webhook-timestamp", "yesterday".to_owned()),
                    ("webhook-signature", signed("msg_7", ts, body)[2].1.clone()),
                ],
                body,
            ),
            400,
        ),
    ];
    for (name, got, want) in &cases {
        assert_eq!(got, want, "{name}");
    }
    let printed = finish(child);
    assert_eq!(printed.len(), cases.len(), "{printed:?}");
    let verified: Vec<bool> = printed
        .iter()
        .map(|v| v["verified"].as_bool().unwrap())
        .collect();
    assert_eq!(verified.iter().filter(|v| **v).count(), 1, "{printed:?}");
}

#[test]
fn listen_status_scripts_only_valid_requests() {
    let (child, port) = listen(&["--count", "2", "--status", "503"]);
    let body = br#"{"a":1}"#;
    let ts = now();
    assert_eq!(
        send(port, "POST", &signed("msg_1", ts, body), body),
        503,
        "a valid request gets the scripted status"
    );
    let mut bad = signed("msg_2", ts, body);
    bad[2].1 = "v1,AAAA".into();
    assert_eq!(
        send(port, "POST", &bad, body),
        401,
        "an invalid one still gets 401"
    );
    let printed = finish(child);
    assert_eq!(printed[0]["status"], 503);
    assert_eq!(printed[1]["status"], 401);
}

/// A one-request-at-a-time application on loopback answering `status` with `answer`; each
/// request it read (head and body) goes to the returned channel.
fn app(status: u16, answer: &'static str) -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = String::new();
            let mut len = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                head.push_str(&line);
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let _ = tx.send(format!("{head}\r\n{}", String::from_utf8_lossy(&body)));
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    (port, rx)
}

#[test]
fn listen_forwards_verified_requests_and_answers_with_the_apps_status() {
    let (app_port, seen_by_app) = app(202, "queued");
    let url = format!("http://127.0.0.1:{app_port}/hooks?x=1");
    let (child, port) = listen(&["--forward-to", &url, "--count", "2"]);
    let body = br#"{"type":"order.created","data":{"id":1}}"#;
    assert_eq!(
        send(port, "POST", &signed("msg_fwd", now(), body), body),
        202
    );
    let got = seen_by_app
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    assert!(got.starts_with("POST /hooks?x=1 HTTP/1.1"), "{got}");
    let lower = got.to_ascii_lowercase();
    assert!(lower.contains("webhook-id: msg_fwd"), "{got}");
    assert!(lower.contains("webhook-signature: v1,"), "{got}");
    assert!(
        got.ends_with(std::str::from_utf8(body).unwrap()),
        "the body as sent: {got}"
    );
    let forged = signed("msg_forged", now(), b"other");
    assert_eq!(send(port, "POST", &forged, body), 401);
    let lines = finish(child);
    assert_eq!(lines[0]["status"], 202, "{lines:?}");
    assert_eq!(lines[1]["status"], 401, "{lines:?}");
    assert!(
        seen_by_app.try_recv().is_err(),
        "a refused request is never forwarded"
    );
}

#[test]
fn listen_answers_502_when_the_app_is_down_and_refuses_a_bad_forward_url() {
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down_port = down.local_addr().unwrap().port();
    drop(down);
    let url = format!("http://127.0.0.1:{down_port}/hooks");
    let (child, port) = listen(&["--forward-to", &url, "--count", "1"]);
    let body = b"{}";
    assert_eq!(
        send(port, "POST", &signed("msg_down", now(), body), body),
        502
    );
    let lines = finish(child);
    assert_eq!(lines[0]["status"], 502);
    for bad in ["https://example.invalid/x", "not a url", "ftp://127.0.0.1/"] {
        let out = outbox_cmd()
            .args([
                "listen",
                "--port",
                "0",
                "--secret",
                SECRET,
                "--forward-to",
                bad,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--forward-to"), "{bad}: {err}");
    }
}
