//! What the application enqueued is what the receiver gets, byte for byte.

use std::sync::Arc;

use outboxkit_core::{BodyFormat, NewMessage};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::strategies::json_text;
use outboxkit_testing::WebhookReceiver;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use crate::{world, BUDGET};

/// How many generated payloads each run sends.
const CASES: usize = 48;

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

/// The bytes of the `data` member of an envelope body: everything between `"data":` and the
/// closing brace (the envelope writes `data` last).
fn data_of(body: &[u8]) -> &[u8] {
    let marker = b",\"data\":";
    let at = body
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("an envelope with data");
    assert_eq!(body.last(), Some(&b'}'));
    &body[at + marker.len()..body.len() - 1]
}

#[tokio::test]
async fn webhook_data_is_the_enqueued_payload_byte_for_byte() {
    let w = world();
    let enveloped = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let raw = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let (_, secret) = w.endpoint(&enveloped.url()).await;
    enveloped.set_secrets(vec![secret]);
    let (_, raw_secret) = w
        .admin
        .create(
            &w.tenant,
            outboxkit_dispatch::NewEndpoint {
                url: raw.url(),
                filter: "*".into(),
                body_format: BodyFormat::Raw,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    raw.set_secrets(vec![raw_secret]);

    let mut runner = TestRunner::deterministic();
    let strategy = json_text();
    let payloads: Vec<String> = (0..CASES)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect();
    for (i, p) in payloads.iter().enumerate() {
        w.store
            .enqueue(NewMessage::raw("a.b", p.as_bytes()).ordering_key(i.to_string()))
            .await
            .unwrap();
    }
    let d = w.webhook_dispatcher(loopback());
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 2 * CASES as u64, "{r:?}");

    let sent: std::collections::HashSet<&[u8]> = payloads.iter().map(|p| p.as_bytes()).collect();
    for receiver in [&enveloped, &raw] {
        let requests = receiver.requests();
        assert_eq!(requests.len(), CASES);
        let mut got = std::collections::HashSet::new();
        for req in &requests {
            assert!(req.verified(), "signature over the bytes sent");
            let data = if std::ptr::eq(receiver, &enveloped) {
                assert!(req.body.starts_with(br#"{"type":"a.b","timestamp":""#));
                assert!(outboxkit_core::is_json_text(&req.body), "{}", req.text());
                data_of(&req.body)
            } else {
                &req.body[..]
            };
            assert!(sent.contains(data), "data changed: {}", req.text());
            got.insert(data.to_vec());
        }
        assert_eq!(got.len(), sent.len(), "every payload arrived");
    }
}
