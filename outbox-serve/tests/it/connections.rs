//! Connections on a real socket: idle and slow-loris connections are closed after the
//! header-read timeout, a slow body gets 408, a huge `Content-Length` gets 413 at once, and
//! connections past the limit are refused without stopping the server.
//!
//! Every wait is bounded (it fails if the outcome never comes); no duration is asserted.

use std::net::SocketAddr;
use std::time::Duration;

use outboxkit_serve::ServeConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{config, App};

/// The longest any outcome below may take to appear.
const BOUND: Duration = Duration::from_secs(20);

fn short() -> ServeConfig {
    ServeConfig {
        header_read_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        max_connections: 4,
        ..config()
    }
}

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(app: &App, cfg: &ServeConfig) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(outboxkit_serve::serve_with(
            listener,
            app.router.clone(),
            cfg.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Server {
            addr,
            stop: Some(tx),
            task,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(BOUND, self.task)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}

/// Read until the peer closes (or resets): everything it sent.
async fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(BOUND, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the server never closed the connection");
    String::from_utf8_lossy(&out).into_owned()
}

/// One request with `connection: close`; the whole answer.
async fn request(addr: SocketAddr, head: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    read_to_close(&mut s).await
}

fn stats(token: &str) -> String {
    format!(
        "GET /v1/tenants/acme/stats HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nconnection: close\r\n\r\n"
    )
}

#[tokio::test]
async fn idle_and_slow_connections_are_closed_after_the_timeout() {
    let cfg = short();
    let app = App::sqlite_with(cfg.clone()).await;
    let server = Server::start(&app, &cfg).await;
    // Idle: connected, nothing sent.
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    // Slow loris: half a request's headers, then nothing.
    let mut loris = TcpStream::connect(server.addr).await.unwrap();
    loris
        .write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    // Keep-alive: one answered request, then idle.
    let mut kept = TcpStream::connect(server.addr).await.unwrap();
    kept.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_to_close(&mut idle).await.is_empty());
    read_to_close(&mut loris).await;
    let answered = read_to_close(&mut kept).await;
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    // A body that stops arriving: 408.
    let slow = request(
        server.addr,
        &format!(
            "POST /v1/tenants/acme/endpoints HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"url\":",
            app.writer
        ),
    )
    .await;
    assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");
    assert!(slow.contains("application/problem+json"), "{slow}");
    // The server still answers.
    let ok = request(server.addr, &stats(&app.writer)).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    server.stop().await;
}

#[tokio::test]
async fn a_huge_content_length_gets_413_before_the_body() {
    let cfg = ServeConfig {
        header_read_timeout: Duration::from_secs(60),
        body_timeout: Duration::from_secs(600),
        ..config()
    };
    let app = App::sqlite_with(cfg.clone()).await;
    let server = Server::start(&app, &cfg).await;
    for auth in [
        format!("authorization: Bearer {}\r\n", app.writer),
        String::new(),
    ] {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(
            format!(
                "POST /v1/tenants/acme/endpoints HTTP/1.1\r\nhost: x\r\n{auth}\
                 content-type: application/json\r\ncontent-length: 100000000000\r\n\r\n0123456789"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        // The answer comes although the body never will (the connection stays open from
        // our side); read just the status line.
        let mut buf = [0u8; 12];
        tokio::time::timeout(BOUND, s.read_exact(&mut buf))
            .await
            .expect("an answer before the body")
            .unwrap();
        assert_eq!(&buf, b"HTTP/1.1 413");
    }
    server.stop().await;
}

#[tokio::test]
async fn connections_past_the_limit_are_refused_and_the_server_recovers() {
    let cfg = ServeConfig {
        header_read_timeout: Duration::from_secs(600),
        max_connections: 4,
        ..config()
    };
    let app = App::sqlite_with(cfg.clone()).await;
    let server = Server::start(&app, &cfg).await;
    // Four connections that send a request and keep the connection open, so each is
    // surely being served.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 12];
        tokio::time::timeout(BOUND, s.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
        held.push(s);
    }
    // Past the limit: refused at once (a 503 or a plain close), never left hanging.
    for _ in 0..20 {
        let answer = request(server.addr, &stats(&app.writer)).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
            "{answer}"
        );
    }
    // Once the others close, an authenticated request is answered.
    drop(held);
    let mut ok = String::new();
    for _ in 0..200 {
        ok = request(server.addr, &stats(&app.writer)).await;
        if ok.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    server.stop().await;
}
