//! What an inbox accepts and refuses, and the status of each refusal.

mod common;

use common::{inbox, secret, signed, NOW_S};
use outboxkit_inbox::{Answer, Rejection, WebhookSecret, MAX_ID_LEN};

#[test]
fn a_signed_request_is_received_with_its_id_and_exact_body() {
    let body = br#"{"type":"order.created","data":{"id":1}}"#;
    let h = signed(&secret(), "msg_1", NOW_S, body);
    let got = inbox().check(&h[..], body).unwrap();
    assert_eq!(got.id, "msg_1");
    assert_eq!(got.body, body.to_vec());
}

#[test]
fn forged_stale_future_oversized_and_unnamed_requests_are_refused_with_their_status() {
    let body = b"{}";
    let other = WebhookSecret::parse("whsec_c2VjcmV0LWtleS1mb3ItdGVzdGluZy0xMjM0").unwrap();
    let forged = signed(&other, "msg_1", NOW_S, body);
    let e = inbox().check(&forged[..], body).unwrap_err();
    assert!(matches!(e, Rejection::Unauthorized(_)), "{e:?}");
    assert_eq!(Answer::refused(&e).status(), 401);

    let tampered = signed(&secret(), "msg_1", NOW_S, body);
    let e = inbox().check(&tampered[..], b"{\"x\":1}").unwrap_err();
    assert_eq!(e.status(), 401, "a body changed after signing: {e}");

    for ts in [NOW_S - 3600, NOW_S + 3600] {
        let h = signed(&secret(), "msg_1", ts, body);
        let e = inbox().check(&h[..], body).unwrap_err();
        assert!(matches!(e, Rejection::BadTimestamp(_)), "{e:?}");
        assert_eq!(e.status(), 400);
    }

    let big = vec![b'x'; 1025];
    let h = signed(&secret(), "msg_1", NOW_S, &big);
    let e = inbox().check(&h[..], &big).unwrap_err();
    assert_eq!(
        e,
        Rejection::TooLarge {
            size: 1025,
            limit: 1024
        }
    );
    assert_eq!(e.status(), 413);

    let mut missing = signed(&secret(), "msg_1", NOW_S, body);
    missing.retain(|(n, _)| n != "webhook-signature");
    assert_eq!(inbox().check(&missing[..], body).unwrap_err().status(), 401);

    let long = "m".repeat(MAX_ID_LEN + 1);
    let h = signed(&secret(), &long, NOW_S, body);
    assert_eq!(inbox().check(&h[..], body).unwrap_err(), Rejection::BadId);
}
