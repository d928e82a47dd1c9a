//! The attempt in full: the dispatcher asks the transport for the detailed send and puts
//! what it kept into the attempt's ledger entry, with the endpoint's secret header values
//! written as `[redacted]`.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::model::REDACTED;
use outboxkit_core::{
    AttemptDetail, AttemptTiming, HeaderInput, NewMessage, Sent, WebhookResponse,
};
use outboxkit_dispatch::NewEndpoint;
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::{Reply, ScriptedTransport, WebhookReceiver};

use crate::{world, BUDGET};

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

#[tokio::test]
async fn the_transports_detail_lands_in_the_ledger_with_secret_headers_redacted() {
    let w = world();
    let (e, _) = w
        .admin
        .create(
            &w.tenant,
            NewEndpoint {
                url: "https://hooks.example/in".into(),
                headers: vec![HeaderInput::parse("X-Api-Key: hunter2", true).unwrap()],
                ..NewEndpoint::default()
            },
        )
        .await
        .unwrap();
    let scripted = ScriptedTransport::new();
    let mut detail = AttemptDetail {
        request_headers: vec![
            pair("webhook-signature", "v1,c2lnbmF0dXJl"),
            pair("x-api-key", "hunter2"),
        ],
        response_headers: vec![pair("content-type", "text/plain"), pair("retry-after", "5")],
        timing: AttemptTiming {
            connect: Some(Duration::from_micros(1_500)),
            first_byte: Some(Duration::from_micros(4_000)),
            total: Duration::from_micros(4_200),
        },
        remote_addr: Some("192.0.2.7:443".into()),
        ..AttemptDetail::default()
    };
    detail.set_response_body(b"busy \x00\xff", 1024);
    scripted.push_sent(Sent {
        response: WebhookResponse::answered(503, Some("5".into()), "busy"),
        detail: Some(Box::new(detail.clone())),
    });
    let d = w.webhook_dispatcher(Arc::new(scripted.clone()));
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    // The transport was given the real value; the ledger keeps it redacted.
    assert_eq!(scripted.requests()[0].header("x-api-key"), Some("hunter2"));
    let delivery = w.one().await;
    assert_eq!(delivery.destination.target(), e.id.to_string());
    let attempts = w.store.attempts(&w.tenant, delivery.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    let kept = attempts[0]
        .record
        .detail
        .as_deref()
        .expect("the detail is kept");
    let mut want = detail;
    want.request_headers[1].1 = REDACTED.to_owned();
    assert_eq!(kept, &want);
    assert_eq!(attempts[0].record.status_code, Some(503));
}

#[tokio::test]
async fn a_real_exchange_is_kept_in_full_and_a_transport_without_detail_keeps_none() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    receiver.script([Reply::Body(418, "short and stout".into())]);
    w.admin
        .create(
            &w.tenant,
            NewEndpoint {
                url: receiver.url(),
                headers: vec![
                    HeaderInput::parse("Authorization: Bearer key-1", true).unwrap(),
                    HeaderInput::parse("X-Route: eu", false).unwrap(),
                ],
                ..NewEndpoint::default()
            },
        )
        .await
        .unwrap();
    let http = HttpTransport::new(
        EgressPolicy::default()
            .allow_http(true)
            .allow_cidr("127.0.0.0/8")
            .unwrap(),
    )
    .unwrap();
    let d = w.webhook_dispatcher(Arc::new(http));
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"n": 2})))
        .await
        .unwrap();
    d.run_once(BUDGET).await.unwrap();
    let got = receiver.requests().pop().unwrap();
    let delivery = w.one().await;
    let attempts = w.store.attempts(&w.tenant, delivery.id).await.unwrap();
    let kept = attempts[0].record.detail.as_deref().expect("kept");
    let header = |name: &str| {
        kept.request_headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("webhook-signature"), got.header("webhook-signature"));
    assert_eq!(header("webhook-id"), Some(delivery.id.to_string().as_str()));
    assert_eq!(header("authorization"), Some(REDACTED));
    assert_eq!(got.header("authorization"), Some("Bearer key-1"));
    assert_eq!(header("x-route"), Some("eu"));
    assert_eq!(kept.response_body, b"short and stout");
    assert_eq!(attempts[0].record.status_code, Some(418));
    assert_eq!(kept.remote_addr, Some(receiver.addr().to_string()));

    // A transport that keeps no detail: the attempt has none.
    let plain = Arc::new(ScriptedTransport::new());
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"n": 3})))
        .await
        .unwrap();
    let d = w.webhook_dispatcher(plain);
    d.run_once(BUDGET).await.unwrap();
    let newest = &w.deliveries().await[0];
    let attempts = w.store.attempts(&w.tenant, newest.id).await.unwrap();
    assert_eq!(attempts[0].record.detail, None);
}

#[tokio::test]
async fn a_mail_api_attempt_is_kept_in_full_with_the_key_redacted() {
    let w = world();
    let api = WebhookReceiver::start().await.unwrap();
    api.script([Reply::Body(422, r#"{"error":"bad address"}"#.into())]);
    let mailer = outboxkit_http::HttpMailer::new(outboxkit_http::HttpMailerConfig {
        url: api.url_for("/v1/send"),
        api_key: "mail-key-1".into(),
        ..outboxkit_http::HttpMailerConfig::default()
    })
    .unwrap();
    let d = w.builder().mailer(Arc::new(mailer)).build().unwrap();
    w.store
        .enqueue(
            NewMessage::new(
                "invoice.sent",
                serde_json::json!({"subject": "Your invoice", "text": "Thanks"}),
            )
            .email("ada@example.com"),
        )
        .await
        .unwrap();
    d.run_once(BUDGET).await.unwrap();
    let got = api.requests().pop().unwrap();
    assert_eq!(got.header("authorization"), Some("Bearer mail-key-1"));
    let delivery = w.one().await;
    let attempts = w.store.attempts(&w.tenant, delivery.id).await.unwrap();
    let kept = attempts[0].record.detail.as_deref().expect("kept");
    let header = |name: &str| {
        kept.request_headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("authorization"), Some(REDACTED));
    assert_eq!(header("idempotency-key"), got.header("idempotency-key"));
    assert_eq!(kept.response_body, br#"{"error":"bad address"}"#);
    assert!(!kept.response_body_truncated);
    assert_eq!(kept.remote_addr, Some(api.addr().to_string()));
    assert!(kept.timing.first_byte.is_some());
    assert!(!format!("{kept:?}").contains("mail-key-1"));
}
