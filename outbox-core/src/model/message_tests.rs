//! Unit tests of `message.rs`: validation, names, excerpts and the envelope.

use super::*;
use crate::model::*;

fn now() -> Timestamp {
    Timestamp::from_unix_millis(1_700_000_000_000).unwrap()
}

#[test]
fn new_message_validates_each_field() {
    let limits = Limits::default();
    let ok = NewMessage::new("order.created", serde_json::json!({"id": 1}))
        .tenant("acme")
        .ordering_key("order:1")
        .idempotency_key("k-1")
        .header("trace", "abc")
        .email("a@example.com")
        .email("a@example.com")
        .delay(Duration::from_secs(60))
        .validate(&limits, now())
        .unwrap();
    assert_eq!(ok.tenant.as_str(), "acme");
    assert_eq!(
        ok.available_at,
        now().saturating_add(Duration::from_secs(60))
    );
    assert_eq!(ok.emails.len(), 1, "recipients are deduplicated");

    let field = |m: NewMessage| m.validate(&limits, now()).unwrap_err().field();
    let base = || NewMessage::new("order.created", serde_json::json!(1));
    assert_eq!(
        field(NewMessage::new("", serde_json::json!(1))),
        Some("topic")
    );
    assert_eq!(
        field(NewMessage::raw("a.b", vec![0u8; 256 * 1024 + 1])),
        Some("payload")
    );
    assert_eq!(field(base().tenant("a b")), Some("tenant"));
    assert_eq!(
        field(base().idempotency_key("has space")),
        Some("idempotency_key")
    );
    assert_eq!(field(base().ordering_key("")), Some("ordering_key"));
    assert_eq!(field(base().header("x", [0xff, 0xfe])), Some("headers"));
    assert_eq!(field(base().header("bad name", "v")), Some("headers"));
    assert_eq!(
        field(base().delay(Duration::from_secs(400 * 86_400))),
        Some("delay")
    );
    assert_eq!(field(base().email("")), Some("recipient"));
}

#[test]
fn past_available_at_means_now() {
    let m = NewMessage::new("a", serde_json::json!(1))
        .available_at(Timestamp::EPOCH)
        .validate(&Limits::default(), now())
        .unwrap();
    assert_eq!(m.available_at, now());
}

#[test]
fn cause_depth_is_limited() {
    let cause = |depth| Cause {
        handler: ConsumerName::new("h").unwrap(),
        message_id: MessageId::from_uuid(uuid::Uuid::from_u128(
            0x0190_0000_0000_7000_8000_0000_0000_0001,
        ))
        .unwrap(),
        topic: Topic::new("a").unwrap(),
        depth,
    };
    let limits = Limits::default();
    assert!(NewMessage::new("a", serde_json::json!(1))
        .caused_by(cause(5))
        .validate(&limits, now())
        .is_ok());
    let e = NewMessage::new("a", serde_json::json!(1))
        .caused_by(cause(6))
        .validate(&limits, now())
        .unwrap_err();
    assert_eq!(e.field(), Some("cause"));
}

#[test]
fn names_round_trip() {
    for s in DeliveryStatus::ALL {
        assert_eq!(DeliveryStatus::parse(s.as_str()).unwrap(), s);
    }
    for c in [
        "timeout",
        "network",
        "dns",
        "egress-refused",
        "redirect",
        "response-4xx",
        "response-5xx",
    ] {
        assert_eq!(ErrorClass::parse(c).unwrap().as_str(), c);
    }
    assert_eq!(
        AttemptOutcome::parse("succeeded").unwrap(),
        AttemptOutcome::Succeeded
    );
    assert_eq!(
        DeadReason::parse("endpoint-removed").unwrap(),
        DeadReason::EndpointRemoved
    );
    let d = Destination::Email(Recipient::new("x@example.com").unwrap());
    assert_eq!(
        Destination::from_parts(d.kind().as_str(), &d.target()).unwrap(),
        d
    );
}

#[test]
fn excerpts_are_bounded_on_char_boundaries() {
    let long = "é".repeat(400);
    let e = excerpt(&long);
    assert!(e.len() <= EXCERPT_LIMIT);
    assert!(e.chars().all(|c| c == 'é'));
    assert_eq!(excerpt("ok\u{7}"), "ok\u{fffd}");
}

#[test]
fn envelope_shape() {
    let m = Message {
        id: MessageId::from_uuid(uuid::Uuid::from_u128(
            0x0190_0000_0000_7000_8000_0000_0000_0001,
        ))
        .unwrap(),
        topic: Topic::new("order.created").unwrap(),
        payload: br#"{"id":1}"#.to_vec(),
        tenant: TenantId::default(),
        ordering_key: None,
        idempotency_key: None,
        available_at: now(),
        headers: Default::default(),
        cause: None,
        created_at: now(),
    };
    let v: serde_json::Value = serde_json::from_slice(&Envelope::of(&m).to_bytes()).unwrap();
    assert_eq!(v["type"], "order.created");
    assert_eq!(v["data"]["id"], 1);
    assert_eq!(v["timestamp"], "2023-11-14T22:13:20.000Z");
}

#[test]
fn envelope_embeds_json_payloads_byte_for_byte() {
    let message = |payload: &[u8]| Message {
        id: MessageId::from_uuid(uuid::Uuid::from_u128(
            0x0190_0000_0000_7000_8000_0000_0000_0001,
        ))
        .unwrap(),
        topic: Topic::new("a.b").unwrap(),
        payload: payload.to_vec(),
        tenant: TenantId::default(),
        ordering_key: None,
        idempotency_key: None,
        available_at: now(),
        headers: Default::default(),
        cause: None,
        created_at: now(),
    };
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let rows: [(&[u8], &str); 9] = [
        (
            br#"{"id":12345678901234567890123}"#,
            r#"{"id":12345678901234567890123}"#,
        ),
        (br#"{"a":1,"a":2}"#, r#"{"a":1,"a":2}"#),
        (b"1e400", "1e400"),
        (b"[1.50, -0, 1E+2]", "[1.50, -0, 1E+2]"),
        (br#" "\u00e9\ud800\/" "#, r#" "\u00e9\ud800\/" "#),
        (deep.as_bytes(), &deep),
        // Not JSON: sent as a JSON string of the text.
        (b"plain text", r#""plain text""#),
        (b"{\"a\":01}", r#""{\"a\":01}""#),
        (b"\xff", "\"\u{fffd}\""),
    ];
    for (payload, data) in rows {
        let env = Envelope::of(&message(payload));
        assert_eq!(env.data, data);
        let bytes = env.to_bytes();
        let expected =
            format!(r#"{{"type":"a.b","timestamp":"2023-11-14T22:13:20.000Z","data":{data}}}"#);
        assert_eq!(bytes, expected.as_bytes());
        assert_eq!(
            Envelope::bytes_of(&message(payload)),
            expected.as_bytes(),
            "written in one buffer: the same bytes"
        );
        assert!(is_json_text(&bytes), "the envelope is JSON: {expected}");
    }
}

#[test]
fn json_strings_are_serde_json_s_text() {
    for s in [
        "order.created",
        "",
        "a\"b",
        "back\\slash",
        "tab\there",
        "nl\n",
        "\u{7f}del",
        "é ünïcode",
        "\u{1}",
        "x</script>",
    ] {
        assert_eq!(json_string(s), serde_json::to_string(s).unwrap(), "{s:?}");
    }
}
