//! Shared helpers: a loopback-only policy, signed requests, a closed port.

use std::time::Duration;

use outboxkit_core::{
    classify, sign, AttemptContext, Clock, EndpointUrl, ErrorClass, RetryPolicy, SignedRequest,
    SystemClock, Timestamp, Verdict, VerdictPolicy, WebhookResponse, WebhookSecret,
};
use outboxkit_http::{EgressPolicy, HttpTransport, HttpTransportConfig};

pub const WAIT: Duration = Duration::from_secs(10);

/// `http` allowed, loopback allow-listed: the policy for a local receiver.
pub fn loopback_policy() -> EgressPolicy {
    EgressPolicy::default()
        .allow_http(true)
        .allow_cidr("127.0.0.0/8")
        .unwrap()
}

pub fn loopback_transport() -> HttpTransport {
    HttpTransport::new(loopback_policy()).unwrap()
}

pub fn secret(byte: u8) -> WebhookSecret {
    WebhookSecret::from_bytes(vec![byte; 32]).unwrap()
}

/// A request signed like the dispatcher signs one.
pub fn signed(
    url: &str,
    secrets: &[&WebhookSecret],
    body: &[u8],
    timeout: Duration,
) -> SignedRequest {
    let id = "msg_2mXJvMHl2Kph3sZ6";
    let ts = SystemClock.now().as_unix_seconds();
    SignedRequest {
        url: EndpointUrl::parse(url).unwrap(),
        headers: vec![
            ("webhook-id".into(), id.into()),
            ("webhook-timestamp".into(), ts.to_string()),
            ("webhook-signature".into(), sign(secrets, id, ts, body)),
        ],
        body: body.to_vec(),
        timeout,
    }
}

/// An unsigned request.
pub fn plain(url: &str, timeout: Duration) -> SignedRequest {
    SignedRequest {
        url: EndpointUrl::parse(url).unwrap(),
        headers: vec![],
        body: b"{}".to_vec(),
        timeout,
    }
}

/// A loopback port nothing listens on.
pub async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    port
}

pub fn now() -> Timestamp {
    Timestamp::from_unix_millis(1_767_225_600_000).unwrap()
}

/// The verdict of a first attempt under the webhook default policy.
pub fn verdict(response: &WebhookResponse) -> Verdict {
    let ctx = AttemptContext {
        attempt: 1,
        snoozes: 0,
        probe: false,
        now: now(),
        jitter: 0.5,
    };
    classify(
        &response.outcome(),
        &ctx,
        &VerdictPolicy::new(RetryPolicy::webhook_default()),
    )
}

/// The failure class, or `None` for an answer.
pub fn failure(response: &WebhookResponse) -> Option<ErrorClass> {
    match response {
        WebhookResponse::Failed { class, .. } => Some(*class),
        WebhookResponse::Answered { .. } => None,
    }
}

pub fn status(response: &WebhookResponse) -> Option<u16> {
    match response {
        WebhookResponse::Answered { status, .. } => Some(*status),
        WebhookResponse::Failed { .. } => None,
    }
}

pub fn short_deadline_transport() -> HttpTransport {
    HttpTransport::with_config(
        loopback_policy(),
        HttpTransportConfig {
            timeout: Duration::from_secs(1),
            ..HttpTransportConfig::default()
        },
    )
    .unwrap()
}
