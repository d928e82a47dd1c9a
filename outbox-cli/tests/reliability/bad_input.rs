//! Part 5, **Bad input catalogue, public API.** Malformed messages, endpoints, secrets, delays,
//! ids and pages through the library's calls on each store: each is refused with
//! `InvalidInput` naming the field (an unknown tenant in replay is `NotFound`, as the store
//! contract says for another tenant's delivery), the message is lowercase, names no secret or
//! credential, and the store's contents — stats, every delivery and every endpoint of the
//! tenant, and the unknown tenant's (none) — are unchanged.
//!
//! The egress rules (`http://` without allow, private, loopback and metadata addresses, IPv6
//! literals) are the `EgressPolicy`'s: the library accepts any syntactically valid URL at
//! creation and refuses the address at delivery time; the CLI applies the
//! policy at creation (see `bad_input_cli`).

use std::time::Duration;

use outboxkit_core::{
    Cursor, DeliveryFilter, DeliveryId, EndpointId, EndpointUrl, Error, ErrorKind, NewMessage,
    PageRequest, TenantId,
};
use outboxkit_dispatch::{NewEndpoint, Operator};
use outboxkit_http::EgressPolicy;

use crate::audit::{all_deliveries, stats};
use crate::backend::{Backend, Kind};

/// Everything a bad input could have changed.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    counts: Vec<u64>,
    deliveries: Vec<String>,
    endpoints: Vec<String>,
    strangers: (usize, usize),
}

/// The tenant that owns nothing.
pub fn stranger() -> TenantId {
    TenantId::new("nobody").expect("a valid tenant")
}

pub async fn snapshot(b: &Backend) -> Snapshot {
    let s = stats(&*b.store).await;
    let counts = outboxkit_core::DeliveryStatus::ALL
        .iter()
        .map(|st| s.count(*st))
        .collect();
    let deliveries = all_deliveries(&*b.store, &b.tenant)
        .await
        .iter()
        .map(|d| {
            format!(
                "{} {} {} {} {}",
                d.id,
                d.status.as_str(),
                d.attempts,
                d.next_attempt_at,
                d.updated_at
            )
        })
        .collect();
    let endpoints = b
        .store
        .list_endpoints(&b.tenant)
        .await
        .expect("list endpoints")
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {} {} {}",
                e.id,
                e.url,
                e.status.as_str(),
                e.filter,
                e.previous_secret.is_some(),
                e.updated_at
            )
        })
        .collect();
    let strangers = (
        all_deliveries(&*b.store, &stranger()).await.len(),
        b.store
            .list_endpoints(&stranger())
            .await
            .expect("list endpoints")
            .len(),
    );
    Snapshot {
        counts,
        deliveries,
        endpoints,
        strangers,
    }
}

/// An endpoint (never delivered to: no relay runs) and three pending deliveries.
pub async fn seed(b: &Backend) -> (EndpointId, DeliveryId) {
    let (endpoint, _) = b.endpoint("http://127.0.0.1:9/hook").await;
    for i in 0..3 {
        b.store
            .enqueue(NewMessage::new("rel.seed", serde_json::json!({ "i": i })))
            .await
            .expect("enqueue a seed message");
    }
    let d = all_deliveries(&*b.store, &b.tenant).await;
    assert_eq!(d.len(), 3);
    (endpoint, d[0].id)
}

/// Check one refusal: the kind, the field, the message's form, and that it names none of
/// `forbidden`.
pub fn check_refusal(
    label: &str,
    r: Result<(), Error>,
    kind: ErrorKind,
    field: &str,
    forbidden: &[&str],
) {
    let e = match r {
        Ok(()) => panic!("{label}: accepted"),
        Err(e) => e,
    };
    assert_eq!(e.kind(), kind, "{label}: {e}");
    assert_eq!(e.field(), Some(field), "{label}: {e}");
    let text = e.to_string();
    assert!(text.contains(field), "{label}: {text}");
    let m = e.message();
    assert!(
        !m.ends_with('.') && m.chars().next().is_some_and(|c| !c.is_uppercase()),
        "{label}: the message is not lowercase without a period: {m}"
    );
    for f in forbidden {
        assert!(!text.contains(f), "{label}: the error shows {f:?}: {text}");
    }
}

/// A payload one byte over the 256 KiB limit, made of a marker that must not be echoed.
fn big_payload() -> Vec<u8> {
    let mut p = "PAYLOAD-MARKER ".repeat(256 * 1024 / 15 + 1).into_bytes();
    p.truncate(256 * 1024 + 1);
    p
}

async fn scenario(kind: Kind) {
    let Some(b) = Backend::open(kind).await else {
        return;
    };
    let name = format!("bad-input/{}", kind.name());
    let (endpoint, delivery) = seed(&b).await;
    let before = snapshot(&b).await;
    let admin = b.admin();
    let store = &*b.store;
    let ok = |_| ();
    let add = |url: &str, secret: Option<&str>, filter: &str| NewEndpoint {
        url: url.to_owned(),
        filter: filter.to_owned(),
        secret: secret.map(str::to_owned),
        ..NewEndpoint::default()
    };
    let msg = || NewMessage::new("rel.bad", serde_json::json!({ "ok": true }));
    let forbidden = [
        "s3cr3t-pw",
        "user:",
        "notbase64",
        "c2hvcnQ",
        "/etc/passwd",
        "PAYLOAD-MARKER",
    ];
    let invalid = ErrorKind::InvalidInput;
    let cases: Vec<(&str, &str, Result<(), Error>)> = vec![
        (
            "empty topic",
            "topic",
            store
                .enqueue(NewMessage::new("", serde_json::json!({})))
                .await
                .map(ok),
        ),
        (
            "129-character topic",
            "topic",
            store
                .enqueue(NewMessage::new("a".repeat(129), serde_json::json!({})))
                .await
                .map(ok),
        ),
        (
            "upper-case topic",
            "topic",
            store
                .enqueue(NewMessage::new("Order.Created", serde_json::json!({})))
                .await
                .map(ok),
        ),
        (
            "invalid UTF-8 header",
            "headers",
            store.enqueue(msg().header("x-h", [0xff_u8])).await.map(ok),
        ),
        (
            "header name with a space",
            "headers",
            store.enqueue(msg().header("bad name", "v")).await.map(ok),
        ),
        (
            "payload over 256 KiB",
            "payload",
            store
                .enqueue(NewMessage::raw("rel.bad", big_payload()))
                .await
                .map(ok),
        ),
        (
            "idempotency key with spaces",
            "idempotency_key",
            store
                .enqueue(msg().idempotency_key("has a space"))
                .await
                .map(ok),
        ),
        (
            "201-character idempotency key",
            "idempotency_key",
            store
                .enqueue(msg().idempotency_key("k".repeat(201)))
                .await
                .map(ok),
        ),
        (
            "ordering key with spaces",
            "ordering_key",
            store.enqueue(msg().ordering_key("a b")).await.map(ok),
        ),
        (
            "400-day delay",
            "delay",
            store
                .enqueue(msg().delay(Duration::from_secs(400 * 86_400)))
                .await
                .map(ok),
        ),
        (
            "invalid tenant",
            "tenant",
            store.enqueue(msg().tenant("bad tenant!")).await.map(ok),
        ),
        (
            "empty e-mail recipient",
            "recipient",
            store.enqueue(msg().email(" ")).await.map(ok),
        ),
        (
            "a batch with one bad message",
            "topic",
            store
                .enqueue_batch(vec![
                    msg(),
                    msg(),
                    NewMessage::new("", serde_json::json!({})),
                ])
                .await
                .map(|_| ()),
        ),
        (
            "url with credentials",
            "url",
            admin
                .create(
                    &b.tenant,
                    add("https://user:s3cr3t-pw@example.com/hook", None, "*"),
                )
                .await
                .map(|_| ()),
        ),
        (
            "file url",
            "url",
            admin
                .create(&b.tenant, add("file:///etc/passwd", None, "*"))
                .await
                .map(|_| ()),
        ),
        (
            "not a url",
            "url",
            admin
                .create(&b.tenant, add("not a url", None, "*"))
                .await
                .map(|_| ()),
        ),
        (
            "url over 2048 bytes",
            "url",
            admin
                .create(
                    &b.tenant,
                    add(
                        &format!("https://example.com/{}", "a".repeat(2100)),
                        None,
                        "*",
                    ),
                )
                .await
                .map(|_| ()),
        ),
        (
            "secret not base64",
            "secret",
            admin
                .create(
                    &b.tenant,
                    add("http://127.0.0.1:9/x", Some("whsec_notbase64!!"), "*"),
                )
                .await
                .map(|_| ()),
        ),
        (
            "secret without whsec_",
            "secret",
            admin
                .create(
                    &b.tenant,
                    add("http://127.0.0.1:9/x", Some("notbase64secret"), "*"),
                )
                .await
                .map(|_| ()),
        ),
        (
            "secret of 5 bytes",
            "secret",
            admin
                .create(
                    &b.tenant,
                    add("http://127.0.0.1:9/x", Some("whsec_c2hvcnQ="), "*"),
                )
                .await
                .map(|_| ()),
        ),
        (
            "invalid filter",
            "filter",
            admin
                .create(&b.tenant, add("http://127.0.0.1:9/x", None, "Bad Filter!"))
                .await
                .map(|_| ()),
        ),
        (
            "rotation to a malformed secret",
            "secret",
            admin
                .rotate_secret(&b.tenant, endpoint, Some("whsec_notbase64!!"))
                .await
                .map(|_| ()),
        ),
        (
            "replay in an invalid tenant",
            "tenant",
            TenantId::new("bad tenant!").map(|_| ()),
        ),
        (
            "delivery id that is no uuid",
            "delivery_id",
            DeliveryId::parse("42").map(|_| ()),
        ),
        (
            "endpoint id that is no uuid",
            "endpoint_id",
            EndpointId::parse("not-an-id").map(|_| ()),
        ),
        (
            "page of 0",
            "limit",
            store
                .list_deliveries(&b.tenant, &DeliveryFilter::default(), PageRequest::first(0))
                .await
                .map(|_| ()),
        ),
        (
            "page of 1001",
            "limit",
            store
                .list_deliveries(
                    &b.tenant,
                    &DeliveryFilter::default(),
                    PageRequest::first(1001),
                )
                .await
                .map(|_| ()),
        ),
        (
            "forged cursor",
            "cursor",
            Cursor::decode("garbage").map(|_| ()),
        ),
        (
            "purge batch of 0",
            "limit",
            Operator::new(b.store.clone(), b.clock.clone())
                .purge(Duration::from_secs(1), 0)
                .await
                .map(|_| ()),
        ),
    ];
    let count = cases.len();
    for (label, field, r) in cases {
        check_refusal(&format!("[{name}] {label}"), r, invalid, field, &forbidden);
    }
    let op = Operator::new(b.store.clone(), b.clock.clone());
    check_refusal(
        &format!("[{name}] replay in an unknown tenant"),
        op.replay(&stranger(), delivery).await,
        ErrorKind::NotFound,
        "delivery",
        &forbidden,
    );
    let conflict = op.replay(&b.tenant, delivery).await;
    assert_eq!(
        conflict.map_err(|e| e.kind()),
        Err(ErrorKind::Conflict),
        "[{name}] replay of a pending delivery"
    );

    // The egress policy: what the CLI and the transport refuse.
    let strict = EgressPolicy::default();
    let private_ok = EgressPolicy::default().allow_private(true).allow_http(true);
    let refused = [
        ("http:// without allow", "http://example.com/hook", &strict),
        ("private address", "https://10.1.2.3/hook", &strict),
        ("loopback", "https://127.0.0.1/hook", &strict),
        ("IPv6 loopback literal", "https://[::1]/hook", &strict),
        (
            "IPv6 unique-local literal",
            "https://[fd00::1]/hook",
            &strict,
        ),
        (
            "metadata address",
            "https://169.254.169.254/latest",
            &strict,
        ),
        (
            "metadata address with private allowed",
            "http://169.254.169.254/latest",
            &private_ok,
        ),
    ];
    for (label, url, policy) in refused {
        let url = EndpointUrl::parse(url).expect("a syntactically valid url");
        let e = policy
            .check_url(&url)
            .expect_err(&format!("[{name}] {label}: allowed"));
        let text = e.to_string();
        assert!(!text.contains(&url.host()), "[{name}] {label}: {text}");
    }
    assert!(
        strict.resolve("localhost").await.is_err(),
        "[{name}] localhost resolved"
    );

    let after = snapshot(&b).await;
    assert_eq!(before, after, "[{name}] bad input changed the store");
    eprintln!(
        "[{name}] {count} malformed inputs refused with InvalidInput, 1 unknown tenant with \
         NotFound, 7 egress refusals; the store is unchanged"
    );
}

#[test]
fn postgres() {
    crate::run(
        "bad-input/postgres",
        Duration::from_secs(120),
        scenario(Kind::Postgres),
    );
}

#[test]
fn sqlite() {
    crate::run(
        "bad-input/sqlite",
        Duration::from_secs(120),
        scenario(Kind::Sqlite),
    );
}

#[test]
fn redis() {
    crate::run(
        "bad-input/redis",
        Duration::from_secs(120),
        scenario(Kind::Redis),
    );
}
