//! Unit tests of `ids.rs`: topics, idempotency keys, tenants, consumers, UUID ids and filters.

use super::*;

#[derive(Debug)]
struct Counter(std::sync::atomic::AtomicU8);
impl Entropy for Counter {
    fn fill(&self, buf: &mut [u8]) {
        for b in buf {
            *b = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[test]
fn topics_table() {
    let long = "a".repeat(128);
    let too_long = "a".repeat(129);
    let cases: &[(&str, bool)] = &[
        ("order.created", true),
        ("order", true),
        ("a.b.c.d", true),
        ("v2.user_signed-up", true),
        (&long, true),
        ("", false),
        (&too_long, false),
        ("Order.created", false),
        ("order..created", false),
        (".order", false),
        ("order.", false),
        ("order created", false),
        ("order.*", false),
        ("_order", false),
        ("ordér", false),
    ];
    for (s, ok) in cases {
        let r = Topic::new(*s);
        assert_eq!(r.is_ok(), *ok, "topic {s:?}");
        if let Err(e) = r {
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert_eq!(e.field(), Some("topic"));
        }
    }
}

#[test]
fn idempotency_keys_table() {
    let max = "k".repeat(200);
    let over = "k".repeat(201);
    let cases: &[(&str, bool)] = &[
        ("order-42", true),
        ("a", true),
        ("!~", true),
        (&max, true),
        ("", false),
        (&over, false),
        ("has space", false),
        ("tab\there", false),
        ("naïve", false),
        ("line\n", false),
    ];
    for (s, ok) in cases {
        let r = IdempotencyKey::new(*s);
        assert_eq!(r.is_ok(), *ok, "key {s:?}");
        if let Err(e) = r {
            assert_eq!(e.field(), Some("idempotency_key"));
        }
    }
}

#[test]
fn tenants_and_consumers() {
    assert!(TenantId::new("acme-42").is_ok());
    assert!(TenantId::new("user@org:eu").is_ok());
    assert_eq!(TenantId::new("").unwrap_err().field(), Some("tenant"));
    assert!(TenantId::new("a b").is_err());
    assert!(TenantId::new("x".repeat(65)).is_err());
    assert_eq!(TenantId::default().as_str(), "default");
    assert!(ConsumerName::new("send-invoice").is_ok());
    assert!(ConsumerName::new("Send").is_err());
    assert!(ConsumerName::new("-x").is_err());
    assert!(Recipient::new("someone@example.com").is_ok());
    assert!(Recipient::new("  ").is_err());
    assert!(Recipient::new("a\nb").is_err());
}

#[test]
fn uuid_ids_are_v7_and_time_ordered() {
    let e = Counter(Default::default());
    let a = MessageId::generate(Timestamp::from_unix_millis(1_000).unwrap(), &e);
    let b = MessageId::generate(Timestamp::from_unix_millis(2_000).unwrap(), &e);
    assert!(a < b);
    assert_eq!(a.as_uuid().get_version_num(), 7);
    assert_eq!(MessageId::parse(&a.to_string()).unwrap(), a);
    let v4 = "4f1e6c1a-8a9f-4d1b-9a57-3d1f2b1c0e11";
    assert_eq!(
        MessageId::parse(v4).unwrap_err().field(),
        Some("message_id")
    );
    assert_eq!(
        DeliveryId::parse("nope").unwrap_err().field(),
        Some("delivery_id")
    );
    let t1 = ClaimToken::generate(&e);
    let t2 = ClaimToken::generate(&e);
    assert_ne!(t1, t2);
}

#[test]
fn filters_match_table() {
    let t = |s: &str| Topic::new(s).unwrap();
    let cases = [
        ("*", "order.created", true),
        ("order.created", "order.created", true),
        ("order.created", "order.updated", false),
        ("order.*", "order.created", true),
        ("order.*", "order.item.added", true),
        ("order.*", "order", false),
        ("order.*", "orders.created", false),
        ("invoice.paid, order.*", "order.x", true),
        ("invoice.paid, order.*", "invoice.paid", true),
        ("invoice.paid, order.*", "invoice.void", false),
    ];
    for (filter, topic, want) in cases {
        let f = TopicFilter::parse(filter).unwrap();
        assert_eq!(f.matches(&t(topic)), want, "{filter} vs {topic}");
    }
    assert!(TopicFilter::parse("").is_err());
    assert!(TopicFilter::parse("order.**").is_err());
    assert!(TopicFilter::parse("*.created").is_err());
    assert_eq!(TopicFilter::parse("a.*,b").unwrap().to_string(), "a.*,b");
}
