//! TLS to the local PostgreSQL (which runs with `ssl = on` and a self-signed certificate for
//! `localhost`): `require` encrypts, `verify-ca` trusts the server's own certificate as the
//! root, `verify-full` refuses a host name the certificate does not name. Each connection
//! reports whether it is encrypted (`pg_stat_ssl`).

use std::time::Duration;

use outboxkit_core::ErrorKind;
use outboxkit_postgres::sqlx;
use outboxkit_postgres::PostgresConfig;
use outboxkit_testing::conformance::backend_unavailable;

fn base_url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn with(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// The server's certificate file (readable on this machine), found through a plain
/// connection; `None` (and a loud skip, or a failure in CI) when PostgreSQL is down.
async fn server_certificate() -> Option<String> {
    let config = PostgresConfig::default();
    let pool = match config
        .connect_pool(&with(&base_url(), "sslmode=disable"))
        .await
    {
        Ok(p) => p,
        Err(e) => return backend_unavailable("postgres", e),
    };
    let (ssl, file): (String, String) =
        sqlx::query_as("select current_setting('ssl'), current_setting('ssl_cert_file')")
            .fetch_one(&pool)
            .await
            .expect("the server's ssl settings");
    assert_eq!(ssl, "on", "the test server must run with ssl = on");
    Some(file)
}

async fn encrypted(url: &str) -> outboxkit_core::Result<bool> {
    let pool = PostgresConfig::default().connect_pool(url).await?;
    let (ssl,): (bool,) =
        sqlx::query_as("select ssl from pg_stat_ssl where pid = pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .expect("pg_stat_ssl");
    Ok(ssl)
}

#[tokio::test]
async fn sslmode_require_connects_encrypted() {
    let Some(_) = server_certificate().await else {
        return;
    };
    assert!(encrypted(&with(&base_url(), "sslmode=require"))
        .await
        .expect("require connects"));
    assert!(!encrypted(&with(&base_url(), "sslmode=disable"))
        .await
        .expect("disable connects"));
}

#[tokio::test]
async fn verify_ca_with_the_server_certificate_as_root_connects() {
    let Some(cert) = server_certificate().await else {
        return;
    };
    let url = base_url().replace("127.0.0.1", "localhost");
    let url = with(&url, &format!("sslmode=verify-ca&sslrootcert={cert}"));
    assert!(encrypted(&url).await.expect("verify-ca connects"));
}

#[tokio::test]
async fn verify_ca_does_not_check_the_host_name() {
    let Some(cert) = server_certificate().await else {
        return;
    };
    // The certificate names `localhost`, not 127.0.0.1: verify-ca checks the chain only, as
    // in libpq (sqlx 0.8.6 with rustls >= 0.23.24 checked the name too: sqlx issue 3793,
    // fixed in 0.9).
    let url = base_url().replace("localhost", "127.0.0.1");
    let url = with(&url, &format!("sslmode=verify-ca&sslrootcert={cert}"));
    assert!(encrypted(&url).await.expect("verify-ca connects"));
}

#[tokio::test]
async fn verify_full_against_the_certified_host_name_connects() {
    let Some(cert) = server_certificate().await else {
        return;
    };
    // The certificate names `localhost`; connect through that name.
    let url = base_url().replace("127.0.0.1", "localhost");
    let url = with(&url, &format!("sslmode=verify-full&sslrootcert={cert}"));
    assert!(encrypted(&url)
        .await
        .expect("verify-full connects to localhost"));
}

#[tokio::test]
async fn verify_full_against_a_wrong_host_name_is_refused_clearly() {
    let Some(cert) = server_certificate().await else {
        return;
    };
    // 127.0.0.1 is not a name the certificate holds.
    let url = base_url().replace("localhost", "127.0.0.1");
    let err = encrypted(&with(
        &url,
        &format!("sslmode=verify-full&sslrootcert={cert}"),
    ))
    .await
    .expect_err("a wrong host name is refused");
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    let text = err.to_string();
    assert!(text.contains("tls failed (sslmode=verify-full)"), "{text}");
    assert!(text.contains("does not match the host name"), "{text}");
    assert!(
        !text.contains("127.0.0.1"),
        "no address in the message: {text}"
    );
}

#[tokio::test]
async fn verify_ca_without_the_root_is_refused_clearly() {
    let Some(_) = server_certificate().await else {
        return;
    };
    let err = encrypted(&with(&base_url(), "sslmode=verify-ca"))
        .await
        .expect_err("a self-signed certificate is not trusted by default");
    assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err}");
    assert!(
        err.to_string().contains("not signed by a trusted root"),
        "{err}"
    );
}

#[tokio::test]
async fn connection_errors_name_their_cause() {
    let Some(_) = server_certificate().await else {
        return;
    };
    let config = PostgresConfig::default();
    // A database that does not exist.
    let url = base_url();
    let (head, _) = url.rsplit_once('/').expect("a url with a database");
    let err = config
        .connect_pool(&format!("{head}/outbox_no_such_db_4f1c"))
        .await
        .expect_err("a missing database");
    assert_eq!(err.kind(), ErrorKind::Misconfigured);
    assert!(err.to_string().contains("database does not exist"), "{err}");
    // A role that does not exist (trust auth still checks the role).
    let host = url.split('@').nth(1).expect("user@host in the test url");
    let err = config
        .connect_pool(&format!(
            "postgres://outbox_no_such_role_4f1c:secret-pw@{host}"
        ))
        .await
        .expect_err("an unknown role");
    assert_eq!(err.kind(), ErrorKind::Misconfigured);
    assert!(err.to_string().contains("credentials"), "{err}");
    assert!(!err.to_string().contains("secret-pw"), "{err}");
    // Nobody listens on this port.
    let err = config
        .connect_pool("postgres://postgres@127.0.0.1:1/test")
        .await
        .expect_err("a closed port");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains("cannot reach postgres"), "{err}");
    // A server that accepts the connection and never answers: the connect timeout applies.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a silent listener");
    let port = silent.local_addr().expect("its address").port();
    let short = PostgresConfig {
        connect_timeout: Duration::from_millis(300),
        ..PostgresConfig::default()
    };
    let err = short
        .connect_pool(&format!("postgres://postgres@127.0.0.1:{port}/test"))
        .await
        .expect_err("a server that never answers");
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        err.to_string().contains("did not answer within 300 ms"),
        "{err}"
    );
    drop(silent);
}
