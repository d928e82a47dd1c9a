//! Endpoints' custom headers on the wire: every request carries them (secret values opened
//! through the vault, following a rotation of the value), and a secret value that does not
//! open parks the delivery like a signing secret that does not open.

use std::sync::Arc;

use outboxkit_core::{
    AttemptOutcome, DeliveryStatus, EndpointUpdate, ErrorClass, HeaderInput, NewMessage,
    SecretContext, SecretVault,
};
use outboxkit_dispatch::NewEndpoint;
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::{ScriptedTransport, WebhookReceiver};

use crate::{world, BUDGET};

fn loopback() -> Arc<HttpTransport> {
    Arc::new(
        HttpTransport::new(
            EgressPolicy::default()
                .allow_http(true)
                .allow_cidr("127.0.0.0/8")
                .unwrap(),
        )
        .unwrap(),
    )
}

fn input(text: &str, secret: bool) -> HeaderInput {
    HeaderInput::parse(text, secret).unwrap()
}

#[tokio::test]
async fn every_request_carries_the_endpoints_headers_through_a_rotation_of_a_secret_value() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let (e, secret) = w
        .admin
        .create(
            &w.tenant,
            NewEndpoint {
                url: receiver.url(),
                headers: vec![
                    input("X-Route: eu-west", false),
                    input("Authorization: Bearer key-1", true),
                ],
                ..NewEndpoint::default()
            },
        )
        .await
        .unwrap();
    receiver.set_secrets(vec![secret]);
    let d = w.webhook_dispatcher(loopback());
    let send = || async {
        w.store
            .enqueue(NewMessage::new(
                "order.created",
                serde_json::json!({"id": 1}),
            ))
            .await
            .unwrap();
        assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
        receiver.requests().pop().unwrap()
    };
    let first = send().await;
    assert!(first.verified(), "still signed");
    assert_eq!(first.header("x-route"), Some("eu-west"));
    assert_eq!(first.header("authorization"), Some("Bearer key-1"));
    assert!(first.header("webhook-id").is_some());

    // Rotate the secret value: the next request carries the new one, and the old one is
    // gone; the plain header stays.
    let sealed = w
        .admin
        .seal_headers(
            &w.tenant,
            e.id,
            &[input("authorization: Bearer key-2", true)],
        )
        .await
        .unwrap();
    w.admin
        .update(
            &w.tenant,
            e.id,
            EndpointUpdate {
                set_headers: sealed,
                ..EndpointUpdate::default()
            },
        )
        .await
        .unwrap();
    let second = send().await;
    assert_eq!(second.header("authorization"), Some("Bearer key-2"));
    assert_eq!(second.header("x-route"), Some("eu-west"));

    // Removed: no longer sent.
    w.admin
        .update(
            &w.tenant,
            e.id,
            EndpointUpdate {
                remove_headers: vec!["X-Route".into()],
                ..EndpointUpdate::default()
            },
        )
        .await
        .unwrap();
    let third = send().await;
    assert_eq!(third.header("x-route"), None);
    assert_eq!(third.header("authorization"), Some("Bearer key-2"));
    assert!(third.verified());
}

#[tokio::test]
async fn a_secret_header_that_does_not_open_parks_the_delivery() {
    let w = world();
    let transport = ScriptedTransport::new();
    let d = w.webhook_dispatcher(Arc::new(transport.clone()));
    let (ep, _) = w.endpoint("https://hooks.example/x").await;
    // A value sealed for another endpoint's header: it does not open for this one.
    let other = outboxkit_core::EndpointId::parse("01900000-0000-7000-8000-0000000000aa").unwrap();
    let moved = outboxkit_core::PlaintextVault
        .seal(
            b"Bearer k",
            &SecretContext::endpoint_header(&w.tenant, other, "authorization"),
        )
        .await
        .unwrap();
    w.store
        .update_endpoint(
            &w.tenant,
            ep,
            &EndpointUpdate {
                set_headers: vec![outboxkit_core::CustomHeader {
                    name: "authorization".into(),
                    value: outboxkit_core::HeaderValue::Secret(moved),
                }],
                ..EndpointUpdate::default()
            },
        )
        .await
        .unwrap();
    w.store
        .enqueue(NewMessage::new(
            "order.created",
            serde_json::json!({"id": 1}),
        ))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.claimed, r.parked), (1, 1));
    assert_eq!(transport.count(), 0, "nothing is sent without the header");
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Pending, 0));
    let ledger = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert_eq!(
        ledger[0].record.outcome,
        AttemptOutcome::Failed(ErrorClass::SecretUnavailable)
    );
    let excerpt = ledger[0].record.excerpt.clone().unwrap_or_default();
    assert!(excerpt.contains("authorization"), "{excerpt}");
    assert!(!excerpt.contains("Bearer"), "{excerpt}");
}
