//! `outbox tokens` and `outbox serve` on SQLite, PostgreSQL and Redis: a token works, a
//! revoked one gets 401, and SIGTERM stops the server cleanly.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use crate::{free_port, outbox, outbox_cmd, sqlite_url};

/// `GET path` over plain HTTP/1.1: the status code and the body.
fn get(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{auth}connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (code, body)
}

/// Tokens and the server against one store.
fn serve_against(store: &str, ns: &str) {
    outbox(&["migrate", "--store", store, "--namespace", ns]).ok();
    let created = outbox(&[
        "tokens",
        "create",
        "--store",
        store,
        "--namespace",
        ns,
        "--tenant",
        "acme",
        "--label",
        "ci",
        "--json",
    ])
    .ok();
    let v: serde_json::Value = serde_json::from_str(&created).unwrap();
    let token = v["token"].as_str().unwrap().to_owned();
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(v["scope"], "tenant:acme");
    let listed = outbox(&[
        "tokens",
        "list",
        "--store",
        store,
        "--namespace",
        ns,
        "--json",
    ])
    .ok();
    assert!(listed.contains(&id) && !listed.contains(&token), "{listed}");

    let port = free_port();
    let mut child = outbox_cmd()
        .args(["serve", "--store", store, "--namespace", ns, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(up, "outbox serve did not listen on {store}");
    assert_eq!(get(port, "/v1/health", None).0, 200);
    assert_eq!(get(port, "/v1/tenants/acme/stats", None).0, 401);
    let (code, body) = get(port, "/v1/tenants/acme/stats", Some(&token));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"dead\":0"), "{body}");
    assert_eq!(get(port, "/v1/tenants/other/stats", Some(&token)).0, 404);
    let (code, doc) = get(port, "/v1/openapi.json", Some(&token));
    assert_eq!(code, 200);
    assert!(doc.contains("\"openapi\":\"3.1.0\""));
    outbox(&["tokens", "revoke", "--store", store, "--namespace", ns, &id]).ok();
    assert_eq!(get(port, "/v1/tenants/acme/stats", Some(&token)).0, 401);

    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "outbox serve exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("outbox serve did not stop on SIGTERM");
}

#[test]
fn tokens_and_serve_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    serve_against(&sqlite_url(dir.path()), "outbox");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_serve_on_postgres() {
    crate::on_postgres("cli_serve", |url, ns| serve_against(&url, &ns)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_serve_on_redis() {
    crate::on_redis("cli-serve", |url, ns| serve_against(&url, &ns)).await;
}

/// Read until the server closes the connection, within a generous bound (fails if it never
/// does): what it sent.
fn read_until_closed(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the server never closed the connection: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn serve_closes_idle_connections_and_caps_them_as_its_flags_say() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &store]).ok();
    // Bad values are refused before anything starts.
    for bad in [
        ["--max-client-connections", "0"],
        ["--header-read-timeout", "0s"],
        ["--body-timeout", "soon"],
    ] {
        let out = outbox(&[
            "serve",
            "--store",
            &store,
            "--listen",
            "127.0.0.1:1",
            bad[0],
            bad[1],
        ]);
        assert_eq!(out.code, 2, "{bad:?}: {}", out.stderr);
        assert!(out.stderr.contains(bad[0]), "{}", out.stderr);
    }
    let port = free_port();
    let mut child = outbox_cmd()
        .args(["serve", "--store", &store, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args([
            "--header-read-timeout",
            "300ms",
            "--max-client-connections",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..100 {
        if get_opt(port).is_some() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(up, "outbox serve did not answer");
    // An idle connection is closed by the server.
    let mut idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert_eq!(read_until_closed(&mut idle), "");
    // Two held connections fill it: a third is refused at once, never left hanging.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET /v1/health HTTP/1.1\r\nhost: x\r\n").unwrap();
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut third = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = write!(third, "GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n");
    let answer = read_until_closed(&mut third);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
        "{answer}"
    );
    // The held ones time out (half their headers came); then the server answers again.
    for mut s in held {
        read_until_closed(&mut s);
    }
    let mut ok = None;
    for _ in 0..100 {
        ok = get_opt(port);
        if ok == Some(200) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ok, Some(200));
    let _ = child.kill();
    let _ = child.wait();
}

/// `GET /v1/health`: its status, or `None` when nothing answered.
fn get_opt(port: u16) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn serve_mounts_under_a_base_path_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    outbox(&["migrate", "--store", &store]).ok();
    for (bad, why) in [
        ("outbox", "must start with /"),
        ("/outbox/", "must not end with /"),
        ("/a/../b", ".."),
        ("/a b", "may hold only"),
    ] {
        let out = outbox(&[
            "serve",
            "--store",
            &store,
            "--listen",
            "127.0.0.1:1",
            "--base-path",
            bad,
        ]);
        assert_eq!(out.code, 2, "{bad:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("--base-path") && out.stderr.contains(why),
            "{}",
            out.stderr
        );
    }
    let port = free_port();
    let mut child = outbox_cmd()
        .args(["serve", "--store", &store, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--base-path", "/outbox"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut health = 0;
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            health = get(port, "/outbox/v1/health", None).0;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(health, 200, "the API under the prefix");
    assert_eq!(get(port, "/v1/health", None).0, 404, "nothing outside it");
    assert_eq!(get(port, "/outbox/console", None).0, 303);
    let _ = child.kill();
    let _ = child.wait();
}
