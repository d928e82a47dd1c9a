//! TLS to Redis: the test starts its own `redis-server` with a TLS port on a free loopback
//! port and a certificate made here with `rcgen` (for `localhost` and `127.0.0.1`), then
//! opens a store over `rediss://` trusting that certificate, and checks the refusals.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    ErrorKind, Ledger, MessageStore, NewMessage, OsEntropy, SystemClock, TenantId,
};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_testing::conformance::backend_unavailable;

/// A `redis-server` listening with TLS only, stopped (killed) on drop.
struct TlsRedis {
    child: Child,
    port: u16,
    cert_pem: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

fn write(path: &Path, body: &[u8]) {
    std::fs::write(path, body).expect("a test certificate file");
}

/// Start the server; `None` (a loud skip, or a failure under
/// `OUTBOX_TEST_REQUIRE_BACKENDS=1`) when `redis-server` is missing or built without TLS.
async fn start() -> Option<TlsRedis> {
    let dir = tempfile::tempdir().expect("a temp dir");
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("a test certificate");
    let cert_pem = certified.cert.pem().into_bytes();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    write(&cert, &cert_pem);
    write(&key, certified.signing_key.serialize_pem().as_bytes());
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1", "127.0.0.2"])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .arg("--tls-ca-cert-file")
        .arg(&cert)
        .args([
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return backend_unavailable("redis-server (for the TLS test)", e),
    };
    let mut server = TlsRedis {
        child,
        port,
        cert_pem,
        _dir: dir,
    };
    for _ in 0..100 {
        if let Ok(Some(status)) = server.child.try_wait() {
            return backend_unavailable(
                "redis-server with TLS",
                format!("it exited with {status} (built without TLS?)"),
            );
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Some(server);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = server.child.kill();
    backend_unavailable("redis-server with TLS", "it did not listen within 5 s")
}

fn trusting(server: &TlsRedis) -> RedisConfig {
    RedisConfig {
        tls_root_cert: Some(server.cert_pem.clone()),
        ..RedisConfig::with_prefix("{outbox-tls}")
    }
}

#[tokio::test]
async fn a_store_works_over_rediss_with_its_certificate_as_root() {
    let Some(server) = start().await else { return };
    let config = trusting(&server);
    let url = format!("rediss://localhost:{}/0", server.port);
    let client = config.client(&url).expect("a client");
    config.probe(&client).await.expect("the TLS server answers");
    let store = RedisStore::new(client, config, Arc::new(SystemClock), Arc::new(OsEntropy))
        .await
        .expect("a store over TLS");
    let enqueued = store
        .enqueue(NewMessage::new("tls.check", serde_json::json!({"n": 1})))
        .await
        .expect("enqueue over TLS");
    let tenant = TenantId::new("default").expect("a tenant");
    let message = store
        .get_message(&tenant, enqueued.message_id)
        .await
        .expect("read back over TLS");
    assert_eq!(message.topic.as_str(), "tls.check");
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused_clearly() {
    let Some(server) = start().await else { return };
    let config = RedisConfig::with_prefix("{outbox-tls}");
    let url = format!("rediss://localhost:{}/0", server.port);
    let client = config.client(&url).expect("a client");
    let err = config
        .probe(&client)
        .await
        .expect_err("the system roots do not hold it");
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(err.to_string().contains("redis tls failed"), "{err}");
}

#[tokio::test]
async fn a_wrong_host_name_is_refused_clearly() {
    let Some(server) = start().await else { return };
    // The server listens on 127.0.0.2 too; the certificate names only localhost and
    // 127.0.0.1.
    let config = trusting(&server);
    let url = format!("rediss://127.0.0.2:{}/0", server.port);
    let client = config.client(&url).expect("a client");
    let err = config
        .probe(&client)
        .await
        .expect_err("a name the certificate lacks");
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{text}");
    assert!(
        text.contains("redis tls failed: the server certificate does not match the host name"),
        "{text}"
    );
    assert!(
        !text.contains("127.0.0.2"),
        "no address in the message: {text}"
    );
}

#[tokio::test]
async fn plain_redis_on_a_tls_port_and_a_closed_port_are_told_apart() {
    let Some(server) = start().await else { return };
    let config = RedisConfig {
        connection_timeout: Duration::from_millis(500),
        response_timeout: Duration::from_millis(500),
        ..RedisConfig::with_prefix("{outbox-tls}")
    };
    let closed = free_port();
    let client = config
        .client(&format!("redis://127.0.0.1:{closed}/0"))
        .expect("a client");
    let err = config.probe(&client).await.expect_err("nobody listens");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        err.to_string()
            .contains("cannot reach redis (connection refused)"),
        "{err}"
    );
    // A server that accepts the connection and never answers: the connect timeout applies.
    let silent = TcpListener::bind("127.0.0.1:0").expect("a silent listener");
    let client = config
        .client(&format!(
            "redis://{}/0",
            silent.local_addr().expect("its address")
        ))
        .expect("a client");
    let err = config.probe(&client).await.expect_err("nobody answers");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    // The client's own connection timeout and the probe's deadline are both 500 ms.
    let text = err.to_string();
    assert!(
        text.contains("redis did not answer within 500 ms")
            || text.contains("cannot reach redis (timed out)"),
        "{text}"
    );
    drop(silent);
    // Plain text to the TLS port: the server never answers a RESP reply.
    let client = config
        .client(&format!("redis://127.0.0.1:{}/0", server.port))
        .expect("a client");
    let err = config
        .probe(&client)
        .await
        .expect_err("plain text to a TLS port");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}
