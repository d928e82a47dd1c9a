//! `NewMessage::validate` never panics; what it accepts is within every limit, and an error
//! names a field.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use outboxkit_core::{Limits, NewMessage, Timestamp};

type Input = (
    String,
    Vec<u8>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<u64>,
    Vec<(String, Vec<u8>)>,
    Vec<String>,
);

fuzz_target!(|input: Input| {
    let (topic, payload, tenant, ordering, idem, delay_ms, headers, emails) = input;
    let limits = Limits {
        max_payload_bytes: 4096,
        max_headers: 8,
        max_recipients: 8,
        ..Limits::default()
    };
    let now = Timestamp::from_unix_millis(1_767_225_600_000).expect("a valid time");
    let mut m = NewMessage::raw(topic, payload);
    if let Some(t) = tenant {
        m = m.tenant(t);
    }
    if let Some(k) = ordering {
        m = m.ordering_key(k);
    }
    if let Some(k) = idem {
        m = m.idempotency_key(k);
    }
    if let Some(ms) = delay_ms {
        m = m.delay(Duration::from_millis(ms));
    }
    for (name, value) in headers {
        m = m.header(name, value);
    }
    for e in emails {
        m = m.email(e);
    }
    match m.validate(&limits, now) {
        Ok(v) => {
            assert!(v.payload.len() <= limits.max_payload_bytes);
            assert!(v.headers.len() <= limits.max_headers);
            assert!(v.emails.len() <= limits.max_recipients);
            assert!(v.available_at >= now);
            assert!(v.available_at <= now.saturating_add(limits.max_delay));
            assert!(v.headers.values().all(|h| h.len() <= 8 * 1024));
        }
        Err(e) => assert!(e.field().is_some(), "an error names its field: {e}"),
    }
});
