//! `verify` never panics, accepts what `sign` produced, and accepts nothing else: when it
//! says yes to arbitrary headers, they hold the real signature of the body.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use outboxkit_core::{sign, verify, HeaderNames, Timestamp, WebhookSecret};

/// The three headers, looked up by name.
fn headers<'a>(id: &'a str, ts: &'a str, sig: &'a str) -> impl Fn(&str) -> Option<&'a str> {
    move |n: &str| match n {
        "webhook-id" => Some(id),
        "webhook-timestamp" => Some(ts),
        "webhook-signature" => Some(sig),
        _ => None,
    }
}

fuzz_target!(
    |input: (Vec<u8>, String, String, String, Vec<u8>, u32, u16)| {
        let (key, id, ts, sig, body, now_s, tolerance) = input;
        let Ok(secret) = WebhookSecret::from_bytes(key) else {
            return;
        };
        let Ok(now) = Timestamp::from_unix_millis(i64::from(now_s) * 1000) else {
            return;
        };
        let tolerance = Duration::from_secs(u64::from(tolerance));
        let names = HeaderNames::default();

        // Arbitrary headers: no panic, and a yes only for the real signature.
        if verify(
            &[&secret],
            &names,
            headers(&id, &ts, &sig),
            &body,
            now,
            tolerance,
        )
        .is_ok()
        {
            let ts_n: i64 = ts.trim().parse().expect("accepted timestamps are integers");
            let real = sign(&[&secret], &id, ts_n, &body);
            let real = real.strip_prefix("v1,").expect("a v1 signature");
            assert!(
                sig.split_whitespace()
                    .filter_map(|p| p.strip_prefix("v1,"))
                    .any(|p| p == real),
                "accepted a signature that is not the real one"
            );
        }

        // What `sign` produces verifies at the signing time.
        let ts_now = now.as_unix_seconds();
        let good = sign(&[&secret], &id, ts_now, &body);
        let ts_text = ts_now.to_string();
        assert!(verify(
            &[&secret],
            &names,
            headers(&id, &ts_text, &good),
            &body,
            now,
            tolerance
        )
        .is_ok());
    }
);
