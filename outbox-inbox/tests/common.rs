//! Signed requests and an inbox checking them, on a manual clock.

use std::sync::Arc;

use outboxkit_core::{sign, Timestamp};
use outboxkit_inbox::{Inbox, Verifier, WebhookSecret};
use outboxkit_testing::ManualClock;

pub const NOW_S: i64 = 1_700_000_000;

pub fn secret() -> WebhookSecret {
    WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()
}

pub fn inbox() -> Inbox {
    let clock = ManualClock::at(Timestamp::from_unix_millis(NOW_S * 1000).unwrap());
    let verifier = Verifier::new([secret()]).unwrap().clock(clock);
    Inbox::new(verifier).max_body(1024)
}

/// The headers of a request signed with `secret` at `ts` (unix seconds).
pub fn signed(secret: &WebhookSecret, id: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    vec![
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), ts.to_string()),
        ("webhook-signature".into(), sign(&[secret], id, ts, body)),
    ]
}

#[allow(dead_code)]
pub fn shared<T>(t: T) -> Arc<T> {
    Arc::new(t)
}
