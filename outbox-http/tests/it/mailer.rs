//! `HttpMailer` against a loopback receiver standing in for a JSON mail API.

use std::time::Duration;

use outboxkit_core::{
    ErrorKind, IdempotencyKey, MailErrorCode as C, MailMessage, MailOutcome as O, Mailer,
};
use outboxkit_http::{HttpMailer, HttpMailerConfig};
use outboxkit_testing::{Reply, WebhookReceiver};

use crate::support::closed_port;

const KEY: &str = "test-api-key-123";

fn mailer(url: String, timeout: Duration) -> HttpMailer {
    HttpMailer::new(HttpMailerConfig {
        url,
        api_key: KEY.into(),
        idempotent: true,
        timeout,
        from_name: Some("Outbox".into()),
    })
    .unwrap()
}

fn message() -> MailMessage {
    MailMessage {
        to: "someone@example.com".into(),
        subject: "Your order".into(),
        text: "Thanks".into(),
        html: Some("<p>Thanks</p>".into()),
        reply_to: None,
        from_name: None,
    }
}

fn key() -> IdempotencyKey {
    IdempotencyKey::new("outbox-01900000-0000-7000-8000-000000000001").unwrap()
}

#[tokio::test]
async fn an_accepted_send_posts_the_message_with_key_and_auth() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([
        Reply::Body(202, r#"{"id":"prov_123","status":"queued"}"#.into()),
        Reply::Status(200),
    ]);
    let m = mailer(r.url_for("/v1/send"), Duration::from_secs(10));
    assert!(m.capabilities().idempotent);
    assert!(m.available());

    let accepted = m.send(&message(), &key()).await.unwrap();
    assert_eq!(accepted.provider_id.as_deref(), Some("prov_123"));
    let accepted = m.send(&message(), &key()).await.unwrap();
    assert_eq!(accepted.provider_id, None, "no JSON id, no provider id");

    let q = &r.requests()[0];
    assert_eq!((q.method.as_str(), q.path.as_str()), ("POST", "/v1/send"));
    assert_eq!(q.header("authorization"), Some("Bearer test-api-key-123"));
    assert_eq!(q.header("idempotency-key"), Some(key().as_str()));
    assert_eq!(q.header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_slice(&q.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "to": "someone@example.com",
            "subject": "Your order",
            "text": "Thanks",
            "html": "<p>Thanks</p>",
            "reply_to": null,
            "from_name": "Outbox",
        })
    );
}

#[tokio::test]
async fn answers_map_to_mail_errors() {
    let rows = [
        (401, C::ConfigurationRefused, O::NotSent),
        (403, C::ConfigurationRefused, O::NotSent),
        (400, C::MessageRefused, O::NotSent),
        (422, C::MessageRefused, O::NotSent),
        (429, C::RateLimited, O::NotSent),
        (500, C::Unavailable, O::Unknown),
        (503, C::Unavailable, O::Unknown),
    ];
    let r = WebhookReceiver::start().await.unwrap();
    r.script(
        rows.iter()
            .map(|(s, _, _)| Reply::Body(*s, r#"{"error":"x"}"#.into())),
    );
    let m = mailer(r.url(), Duration::from_secs(10));
    for (status, code, outcome) in rows {
        let e = m.send(&message(), &key()).await.unwrap_err();
        assert_eq!((e.code, e.outcome), (code, outcome), "{status}");
        let text = e.to_string();
        assert!(
            !text.contains("example.com") && !text.contains(KEY) && !text.contains("127.0.0.1")
        );
    }
    assert_eq!(r.count(), rows.len());
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Redirect(302, r.url_for("/other"))]);
    let e = mailer(r.url(), Duration::from_secs(10))
        .send(&message(), &key())
        .await
        .unwrap_err();
    assert_eq!((e.code, e.outcome), (C::ConfigurationRefused, O::NotSent));
    assert!(!r.wait_for(2, Duration::from_millis(200)).await);
}

#[tokio::test]
async fn a_timeout_after_sending_is_unknown() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Delay(Duration::from_secs(30), 200)]);
    let m = mailer(r.url(), Duration::from_millis(500));
    let e = m.send(&message(), &key()).await.unwrap_err();
    assert_eq!((e.code, e.outcome), (C::Timeout, O::Unknown));
    assert_eq!(r.count(), 1, "the request was sent");
}

#[tokio::test]
async fn a_reset_after_sending_is_unknown_and_a_refused_connection_is_not_sent() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Reset]);
    let e = mailer(r.url(), Duration::from_secs(10))
        .send(&message(), &key())
        .await
        .unwrap_err();
    assert_eq!((e.code, e.outcome), (C::Unavailable, O::Unknown), "{e}");

    let port = closed_port().await;
    let m = mailer(
        format!("http://127.0.0.1:{port}/send"),
        Duration::from_secs(10),
    );
    let e = m.send(&message(), &key()).await.unwrap_err();
    assert_eq!((e.code, e.outcome), (C::Unavailable, O::NotSent), "{e}");
}

#[tokio::test]
async fn every_attempt_carries_the_same_idempotency_key() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Status(503), Reply::Status(429), Reply::Status(200)]);
    let m = mailer(r.url(), Duration::from_secs(10));
    assert!(m.send(&message(), &key()).await.is_err());
    assert!(m.send(&message(), &key()).await.is_err());
    assert!(m.send(&message(), &key()).await.is_ok());
    let keys: Vec<_> = r
        .requests()
        .iter()
        .map(|q| q.header("idempotency-key").map(str::to_owned))
        .collect();
    assert_eq!(keys, vec![Some(key().as_str().to_owned()); 3]);
}

#[test]
fn bad_mailer_settings_are_misconfigured_and_the_key_never_prints() {
    let good = HttpMailerConfig {
        url: "https://mail.example.com/send".into(),
        api_key: KEY.into(),
        ..HttpMailerConfig::default()
    };
    assert!(!good.idempotent);
    let m = HttpMailer::new(good.clone()).unwrap();
    assert!(!m.capabilities().idempotent);
    assert!(!format!("{m:?}").contains(KEY));
    assert!(!format!("{good:?}").contains(KEY));
    let cases = [
        HttpMailerConfig {
            url: "not a url".into(),
            ..good.clone()
        },
        HttpMailerConfig {
            url: "ftp://mail.example.com/".into(),
            ..good.clone()
        },
        HttpMailerConfig {
            api_key: "".into(),
            ..good.clone()
        },
        HttpMailerConfig {
            api_key: "a\nb".into(),
            ..good.clone()
        },
        HttpMailerConfig {
            timeout: Duration::ZERO,
            ..good.clone()
        },
    ];
    for config in cases {
        let e = HttpMailer::new(config).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Misconfigured);
        assert!(!e.to_string().contains(KEY));
    }
}

#[tokio::test]
async fn an_untrusted_certificate_fails_the_tls_handshake_unsent() {
    // The SMTP stand-in speaking TLS from the first byte, with a self-signed certificate.
    let tls = outboxkit_testing::SmtpStandIn::builder()
        .implicit_tls()
        .start()
        .await;
    let m = mailer(
        format!("https://127.0.0.1:{}/send", tls.port()),
        Duration::from_secs(5),
    );
    let e = m.send(&message(), &key()).await.unwrap_err();
    assert_eq!((e.code, e.outcome), (C::Unavailable, O::NotSent), "{e}");
    assert_eq!(
        e.detail, "tls handshake with the mail service failed",
        "{e}"
    );
}

#[tokio::test]
async fn a_detailed_send_keeps_the_exchange_with_the_key_redacted_and_the_body_capped() {
    use outboxkit_core::model::REDACTED;
    let r = WebhookReceiver::start().await.unwrap();
    r.script([
        Reply::Body(202, r#"{"id":"prov_9"}"#.into()),
        Reply::Body(503, "x".repeat(100)),
    ]);
    let m = mailer(r.url_for("/v1/send"), Duration::from_secs(10))
        .with_response_body_cap(10)
        .unwrap();
    let sent = m.send_detailed(&message(), &key()).await;
    assert_eq!(sent.result.unwrap().provider_id.as_deref(), Some("prov_9"));
    let d = sent.detail.unwrap();
    let header = |name: &str| {
        d.request_headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("authorization").as_deref(), Some(REDACTED));
    assert_eq!(header("idempotency-key").as_deref(), Some(key().as_str()));
    assert!(header("user-agent").is_some());
    assert_eq!(d.response_body, br#"{"id":"pro"#);
    assert!(d.response_body_truncated);
    assert_eq!(d.remote_addr, Some(r.addr().to_string()));
    assert!(
        d.timing.connect.is_some(),
        "this send opened the connection"
    );
    assert!(d.timing.first_byte.is_some());
    assert!(header("content-length").is_some(), "the headers as sent");
    assert_eq!(
        r.requests()[0].header("authorization"),
        Some("Bearer test-api-key-123")
    );

    let failed = m.send_detailed(&message(), &key()).await;
    assert_eq!(failed.result.unwrap_err().code, C::Unavailable);
    let d = failed.detail.unwrap();
    assert_eq!(d.response_body, b"xxxxxxxxxx");
    assert!(d.response_body_truncated);
    assert!(!format!("{d:?}").contains(KEY));
    let e = mailer(r.url_for("/v1/send"), Duration::from_secs(10))
        .with_response_body_cap(65_537)
        .unwrap_err();
    assert_eq!(e.field(), Some("response_body_cap"));
}
