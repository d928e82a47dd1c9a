//! The webhook envelope is always JSON, embeds a JSON payload byte for byte, and
//! `is_json_text` agrees with serde_json on every payload serde_json can parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outboxkit_core::{is_json_text, Envelope, Message, MessageId, TenantId, Timestamp, Topic};

fuzz_target!(|payload: Vec<u8>| {
    let at = Timestamp::from_unix_millis(1_767_225_600_000).expect("a valid time");
    let id = MessageId::parse("01900000-0000-7000-8000-000000000001").expect("a valid id");
    let message = Message {
        id,
        topic: Topic::new("a.b").expect("a valid topic"),
        payload: payload.clone(),
        tenant: TenantId::default(),
        ordering_key: None,
        idempotency_key: None,
        available_at: at,
        headers: Default::default(),
        cause: None,
        created_at: at,
    };
    let env = Envelope::of(&message);
    let bytes = env.to_bytes();
    assert!(is_json_text(&bytes), "the envelope is JSON");
    let json = is_json_text(&payload);
    if json {
        assert_eq!(
            env.data.as_bytes(),
            &payload[..],
            "data is the payload byte for byte"
        );
        assert!(bytes.ends_with(&[&payload[..], b"}"].concat()));
    } else {
        let s: String = serde_json::from_str(&env.data).expect("a non-JSON payload is a string");
        assert_eq!(s, String::from_utf8_lossy(&payload));
    }
    // serde_json parses within its recursion limit; whatever it takes, is_json_text takes.
    if serde_json::from_slice::<serde_json::Value>(&payload).is_ok() {
        assert!(json);
    }
});
