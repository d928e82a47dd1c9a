//! `HttpTransport` against the loopback `WebhookReceiver`.

use std::time::Duration;

use outboxkit_core::{
    AttemptOutcome, DeadReason, ErrorClass, Verdict, WebhookResponse, WebhookTransport,
};
use outboxkit_testing::{Reply, WebhookReceiver};

use crate::support::*;

#[tokio::test]
async fn each_status_class_maps_to_its_verdict_and_every_signature_verifies() {
    let key = secret(1);
    let r = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![key.clone()]);
    let t = loopback_transport();
    // (status, class in the ledger, verdict name)
    let rows: [(u16, AttemptOutcome, &str); 12] = [
        (200, AttemptOutcome::Succeeded, "succeeded"),
        (201, AttemptOutcome::Succeeded, "succeeded"),
        (204, AttemptOutcome::Succeeded, "succeeded"),
        (301, AttemptOutcome::Failed(ErrorClass::Redirect), "retry"),
        (
            400,
            AttemptOutcome::Failed(ErrorClass::Response4xx),
            "retry",
        ),
        (401, AttemptOutcome::Failed(ErrorClass::Response4xx), "held"),
        (403, AttemptOutcome::Failed(ErrorClass::Response4xx), "held"),
        (
            408,
            AttemptOutcome::Failed(ErrorClass::Response4xx),
            "retry",
        ),
        (410, AttemptOutcome::Failed(ErrorClass::Response4xx), "dead"),
        (
            429,
            AttemptOutcome::Failed(ErrorClass::Response4xx),
            "retry",
        ),
        (
            500,
            AttemptOutcome::Failed(ErrorClass::Response5xx),
            "retry",
        ),
        (
            503,
            AttemptOutcome::Failed(ErrorClass::Response5xx),
            "retry",
        ),
    ];
    r.script(rows.iter().map(|(s, _, _)| Reply::Status(*s)));
    for (want, ledger, name) in rows {
        let resp = t.send(signed(&r.url(), &[&key], br#"{"n":1}"#, WAIT)).await;
        assert_eq!(status(&resp), Some(want), "{resp:?}");
        assert_eq!(resp.outcome().attempt_outcome(), Some(ledger), "{want}");
        let v = verdict(&resp);
        assert_eq!(v.name(), name, "{want}: {v:?}");
        if want == 410 {
            assert_eq!(
                v,
                Verdict::Dead {
                    reason: DeadReason::Gone
                }
            );
        }
    }
    let reqs = r.requests();
    assert_eq!(reqs.len(), rows.len());
    for q in &reqs {
        assert_eq!(q.signature, Some(Ok(())), "every request verifies");
        assert_eq!(q.method, "POST");
        assert_eq!(q.path, "/hook");
        assert_eq!(q.body, br#"{"n":1}"#);
        assert_eq!(q.header("content-type"), Some("application/json"));
        assert_eq!(q.header("content-length"), Some("7"));
        assert_eq!(
            q.header("user-agent"),
            Some(concat!("outbox/", env!("CARGO_PKG_VERSION")))
        );
    }
}

#[tokio::test]
async fn a_given_content_type_is_kept() {
    let r = WebhookReceiver::start().await.unwrap();
    let mut req = plain(&r.url(), WAIT);
    req.headers
        .push(("Content-Type".into(), "text/plain".into()));
    let resp = loopback_transport().send(req).await;
    assert_eq!(status(&resp), Some(200));
    let q = &r.requests()[0];
    assert_eq!(q.header("content-type"), Some("text/plain"));
    assert_eq!(
        q.headers
            .iter()
            .filter(|(k, _)| k == "content-type")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_redirect_is_answered_not_followed() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Redirect(307, r.url_for("/elsewhere"))]);
    let resp = loopback_transport().send(plain(&r.url(), WAIT)).await;
    assert_eq!(status(&resp), Some(307));
    assert_eq!(
        resp.outcome().attempt_outcome(),
        Some(AttemptOutcome::Failed(ErrorClass::Redirect))
    );
    assert!(!r.wait_for(2, Duration::from_millis(200)).await);
    assert_eq!(r.count(), 1, "the receiver sees one request");
    assert_eq!(r.requests()[0].path, "/hook");
}

#[tokio::test]
async fn a_stall_after_the_headers_ends_as_a_timeout() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([
        Reply::StallAfterHeaders(200),
        Reply::Delay(Duration::from_secs(30), 200),
    ]);
    let t = loopback_transport();
    let resp = t.send(plain(&r.url(), Duration::from_secs(1))).await;
    assert_eq!(failure(&resp), Some(ErrorClass::Timeout), "{resp:?}");
    // the same for an answer that never comes, with the transport's own deadline
    let resp = short_deadline_transport()
        .send(plain(&r.url(), Duration::ZERO))
        .await;
    assert_eq!(failure(&resp), Some(ErrorClass::Timeout), "{resp:?}");
    assert_eq!(r.count(), 2);
}

#[tokio::test]
async fn a_huge_body_is_capped_and_the_excerpt_is_short() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([
        Reply::HugeBody(200, 10 * 1024 * 1024),
        Reply::Body(500, "e".repeat(5000)),
    ]);
    let t = loopback_transport();
    let resp = t.send(plain(&r.url(), WAIT)).await;
    assert_eq!(status(&resp), Some(200));
    assert!(resp.excerpt().len() <= 300);
    assert!(resp.excerpt().starts_with("xxx"));
    let resp = t.send(plain(&r.url(), WAIT)).await;
    assert_eq!(status(&resp), Some(500));
    assert_eq!(resp.excerpt(), "e".repeat(300));
}

#[tokio::test]
async fn reading_an_answer_stops_at_the_64_kib_cap() {
    // A body that never ends: 128 KiB, then nothing. A transport that read past its cap
    // would wait for the rest until the deadline and report a timeout; one that stops at
    // 64 KiB returns the answer's status.
    assert_eq!(
        outboxkit_http::HttpTransportConfig::default().max_body,
        64 * 1024
    );
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::EndlessBody(200, 128 * 1024)]);
    let t = loopback_transport();
    let resp = t.send(plain(&r.url(), Duration::from_secs(3))).await;
    assert_eq!(status(&resp), Some(200), "{resp:?}");
    assert!(resp.excerpt().starts_with("xxx"));
    // Under the cap the whole body is waited for: the same answer at 32 KiB times out.
    r.script([Reply::EndlessBody(200, 32 * 1024)]);
    let resp = t.send(plain(&r.url(), Duration::from_secs(1))).await;
    assert_eq!(failure(&resp), Some(ErrorClass::Timeout), "{resp:?}");
}

#[tokio::test]
async fn retry_after_reaches_the_verdict() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([
        Reply::RetryAfter(503, "7200".into()),
        Reply::RetryAfter(429, "soon".into()),
    ]);
    let t = loopback_transport();
    let resp = t.send(plain(&r.url(), WAIT)).await;
    assert_eq!(
        resp.outcome(),
        outboxkit_core::Outcome::Http {
            status: 503,
            retry_after: Some("7200".into())
        }
    );
    assert_eq!(
        verdict(&resp),
        Verdict::Retry {
            at: now().saturating_add(Duration::from_secs(7200))
        }
    );
    let resp = t.send(plain(&r.url(), WAIT)).await;
    assert!(matches!(&resp, WebhookResponse::Answered { retry_after: Some(v), .. } if v == "soon"));
}

#[tokio::test]
async fn a_rotated_secret_signs_twice_and_either_receiver_accepts() {
    let (old, new) = (secret(7), secret(8));
    let knows_old = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![old.clone()]);
    let knows_new = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![new.clone()]);
    let t = loopback_transport();
    for r in [&knows_old, &knows_new] {
        let resp = t.send(signed(&r.url(), &[&new, &old], b"{}", WAIT)).await;
        assert_eq!(status(&resp), Some(200));
        let q = &r.requests()[0];
        assert_eq!(q.header("webhook-signature").unwrap().split(' ').count(), 2);
        assert_eq!(q.signature, Some(Ok(())));
    }
    // and a receiver that knows neither rejects it
    let stranger = WebhookReceiver::start()
        .await
        .unwrap()
        .with_secrets(vec![secret(9)]);
    t.send(signed(&stranger.url(), &[&new, &old], b"{}", WAIT))
        .await;
    assert_eq!(
        stranger.requests()[0].signature,
        Some(Err(outboxkit_core::VerifyError::Mismatch))
    );
}

#[tokio::test]
async fn a_reset_and_a_refused_connection_are_network_failures() {
    let r = WebhookReceiver::start().await.unwrap();
    r.script([Reply::Reset]);
    let t = loopback_transport();
    let resp = t.send(plain(&r.url(), WAIT)).await;
    assert_eq!(failure(&resp), Some(ErrorClass::Network), "{resp:?}");
    assert_eq!(resp.excerpt(), "the connection closed before an answer");
    assert_eq!(r.count(), 1);
    assert_eq!(verdict(&resp).name(), "retry");

    let port = closed_port().await;
    let resp = t
        .send(plain(&format!("http://127.0.0.1:{port}/hook"), WAIT))
        .await;
    assert_eq!(failure(&resp), Some(ErrorClass::Network), "{resp:?}");
    assert_eq!(resp.excerpt(), "connection refused");
}

#[tokio::test]
async fn connections_are_reused() {
    let r = WebhookReceiver::start().await.unwrap();
    let t = loopback_transport();
    for _ in 0..5 {
        assert_eq!(status(&t.send(plain(&r.url(), WAIT)).await), Some(200));
    }
    assert_eq!(r.count(), 5);
    assert_eq!(
        r.connections(),
        1,
        "one keep-alive connection served every request"
    );
}

#[tokio::test]
async fn https_runs_a_verified_tls_handshake() {
    // A TLS server on loopback (the SMTP stand-in speaking TLS from the first byte) with a
    // self-signed certificate for `localhost`: the transport's rustls (ring, webpki roots)
    // runs the handshake and refuses the certificate, which no trusted root signed.
    let tls = outboxkit_testing::SmtpStandIn::builder()
        .implicit_tls()
        .start()
        .await;
    let t = loopback_transport();
    let url = format!("https://127.0.0.1:{}/hook", tls.port());
    let resp = t.send(plain(&url, Duration::from_secs(5))).await;
    match &resp {
        WebhookResponse::Failed { class, detail } => {
            assert_eq!(*class, ErrorClass::Network, "{resp:?}");
            assert_eq!(detail, "tls handshake failed", "{resp:?}");
        }
        WebhookResponse::Answered { .. } => panic!("an untrusted certificate was accepted"),
    }
}
