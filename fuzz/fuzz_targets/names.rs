//! The id, name, key, topic-filter and secret parsers never panic, and whatever they accept
//! round-trips: its text parses back to the same value (what a store writes, it can read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use outboxkit_core::{
    ConsumerName, DeliveryId, EndpointId, IdempotencyKey, MessageId, OrderingKey, Recipient,
    TenantId, Topic, TopicFilter, TopicPattern, WebhookSecret,
};

macro_rules! round_trip {
    ($s:expr, $($ty:ty),*) => {$(
        if let Ok(v) = <$ty>::new($s) {
            assert_eq!(<$ty>::new(v.as_str()).ok().as_ref(), Some(&v));
        }
    )*};
}

fuzz_target!(|s: &str| {
    round_trip!(
        s,
        Topic,
        TenantId,
        ConsumerName,
        IdempotencyKey,
        OrderingKey,
        Recipient
    );
    if let Ok(id) = MessageId::parse(s) {
        assert_eq!(MessageId::parse(&id.to_string()).ok(), Some(id));
    }
    if let Ok(id) = DeliveryId::parse(s) {
        assert_eq!(DeliveryId::parse(&id.to_string()).ok(), Some(id));
    }
    if let Ok(id) = EndpointId::parse(s) {
        assert_eq!(EndpointId::parse(&id.to_string()).ok(), Some(id));
    }
    if let Ok(p) = TopicPattern::parse(s) {
        assert_eq!(TopicPattern::parse(&p.to_string()).ok(), Some(p));
    }
    if let Ok(f) = TopicFilter::parse(s) {
        assert_eq!(TopicFilter::parse(&f.to_string()).ok(), Some(f));
    }
    if let Ok(secret) = WebhookSecret::parse(s) {
        assert_eq!(WebhookSecret::parse(&secret.expose()).ok(), Some(secret));
    }
});
