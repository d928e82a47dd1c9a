//! Proptest strategies for outbox values: topics, tenants, keys, payloads and whole
//! [`NewMessage`]s, valid by construction (and a few deliberately invalid ones).
//!
//! ```
//! use proptest::prelude::*;
//! use outboxkit_core::{Limits, Timestamp};
//!
//! proptest!(|(m in outboxkit_testing::strategies::new_message())| {
//!     let now = Timestamp::from_unix_millis(1_767_225_600_000).unwrap();
//!     prop_assert!(m.validate(&Limits::default(), now).is_ok());
//! });
//! ```

use std::time::Duration;

use outboxkit_core::{NewMessage, TenantId, Topic};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;

/// A valid topic text: one to four dot-separated lowercase parts (`order.created`).
pub fn topic_str() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_-]{0,8}(\\.[a-z0-9][a-z0-9_-]{0,8}){0,3}"
}

/// A valid [`Topic`].
pub fn topic() -> impl Strategy<Value = Topic> {
    topic_str().prop_map(|s| Topic::new(s).expect("the pattern only yields valid topics"))
}

/// A topic text that validation refuses (empty, uppercase, spaces, empty parts, too long).
pub fn invalid_topic_str() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[A-Z][a-z]{0,8}",
        "[a-z]{1,5} [a-z]{1,5}",
        "[a-z]{1,5}\\.\\.[a-z]{1,5}",
        "\\.[a-z]{1,5}",
        "[a-z]{129,140}",
    ]
}

/// A valid tenant text.
pub fn tenant_str() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.:@-]{1,24}"
}

/// A valid [`TenantId`].
pub fn tenant() -> impl Strategy<Value = TenantId> {
    tenant_str().prop_map(|s| TenantId::new(s).expect("the pattern only yields valid tenants"))
}

/// A valid ordering or idempotency key (visible ASCII, no spaces).
pub fn key_str() -> impl Strategy<Value = String> {
    "[!-~]{1,32}"
}

/// Any payload bytes, up to `max` long.
pub fn payload(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max)
}

/// A small JSON value (nested objects, arrays, strings, numbers, booleans, null).
pub fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[ -~]{0,16}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Headers with valid names and values.
pub fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    vec(("[a-z][a-z0-9_.-]{0,15}", "[ -~]{0,32}"), 0..4)
}

/// A valid [`NewMessage`]: a topic, a JSON or raw payload, and optionally a tenant, an
/// ordering key, an idempotency key, a delay of up to a day, headers and recipients.
pub fn new_message() -> impl Strategy<Value = NewMessage> {
    let body = prop_oneof![
        json().prop_map(|j| serde_json::to_vec(&j).unwrap_or_default()),
        payload(256),
    ];
    (
        topic_str(),
        body,
        option::of(tenant_str()),
        option::of(key_str()),
        option::of(key_str()),
        option::of(0u64..86_400_000),
        headers(),
        vec("[a-z]{1,8}@example\\.com", 0..3),
    )
        .prop_map(
            |(topic, body, tenant, ordering, idem, delay, headers, emails)| {
                let mut m = NewMessage::raw(topic, body);
                if let Some(t) = tenant {
                    m = m.tenant(t);
                }
                if let Some(k) = ordering {
                    m = m.ordering_key(k);
                }
                if let Some(k) = idem {
                    m = m.idempotency_key(k);
                }
                if let Some(ms) = delay {
                    m = m.delay(Duration::from_millis(ms));
                }
                for (name, value) in headers {
                    m = m.header(name, value);
                }
                for e in emails {
                    m = m.email(e);
                }
                m
            },
        )
}

/// JSON text that a parse-and-reserialise round trip would change: integers beyond 2^53,
/// duplicate keys, exponent and trailing-zero forms (`1e400`, `1.50`, `-0`), escapes, raw
/// unicode, lone surrogate escapes, odd whitespace and nesting deeper than serde_json's
/// default recursion limit of 128.
pub fn json_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        Just("12345678901234567890123".to_owned()),
        Just("-9007199254740993".to_owned()),
        Just("1e400".to_owned()),
        Just("1.50".to_owned()),
        Just("-0".to_owned()),
        Just("1E+2".to_owned()),
        Just("-1.0e-7".to_owned()),
        Just("0.1000000000000000055511151231257827".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        (any::<u64>(), 0u32..40).prop_map(|(m, e)| format!("{m}.{m}e-{e}")),
    ];
    let string = prop_oneof![
        Just(r#""\u00e9\u00E9\/\"\\\b\f\n\r\t""#.to_owned()),
        Just(r#""\ud83d\ude00 \ud800""#.to_owned()),
        Just("\"é 😀 \u{2028} \u{7f}\"".to_owned()),
        "[ -!#-\\[\\]-~\u{a0}-\u{2ff}\u{1f600}-\u{1f64f}]{0,12}".prop_map(|s| format!("\"{s}\"")),
    ];
    let ws = prop_oneof![Just(""), Just(" "), Just("\n\t "), Just("\r\n")];
    let leaf = prop_oneof![
        number,
        string,
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("null".to_owned()),
    ];
    let value = leaf.prop_recursive(4, 32, 4, move |inner| {
        let ws = ws.clone();
        prop_oneof![
            (vec(inner.clone(), 0..4), ws.clone())
                .prop_map(|(items, ws)| format!("[{ws}{}{ws}]", items.join(&format!("{ws},")))),
            // Keys from a tiny alphabet, so duplicates are common.
            (vec(("[ab]", inner), 0..4), ws).prop_map(|(pairs, ws)| {
                let body: Vec<String> = pairs
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\"{ws}:{ws}{v}"))
                    .collect();
                format!("{{{ws}{}{ws}}}", body.join(","))
            }),
        ]
    });
    prop_oneof![
        4 => value.clone(),
        1 => (value, 129usize..400).prop_map(|(v, depth)| {
            format!("{}{v}{}", "[".repeat(depth), "]".repeat(depth))
        }),
        1 => Just(r#"{"id":12345678901234567890123,"a":1,"a":2,"n":1.50,"e":1e400}"#.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboxkit_core::{Limits, Timestamp};

    fn now() -> Timestamp {
        Timestamp::from_unix_millis(1_767_225_600_000).expect("a valid time")
    }

    proptest! {
        #[test]
        fn generated_messages_validate(m in new_message()) {
            prop_assert!(m.validate(&Limits::default(), now()).is_ok());
        }

        #[test]
        fn json_text_is_json(t in json_text()) {
            prop_assert!(outboxkit_core::is_json_text(t.as_bytes()), "{}", t);
        }

        #[test]
        fn invalid_topics_are_refused(t in invalid_topic_str()) {
            prop_assert!(Topic::new(t).is_err());
        }

        #[test]
        fn tenants_and_topics_round_trip(t in tenant(), p in topic()) {
            prop_assert_eq!(TenantId::new(t.as_str()).ok(), Some(t.clone()));
            prop_assert_eq!(Topic::new(p.as_str()).ok(), Some(p.clone()));
        }
    }
}
