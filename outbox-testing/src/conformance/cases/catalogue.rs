//! The event-type catalogue: types round trip, and every enqueue path enforces the mode.

use outboxkit_core::catalogue::CACHE_MAX_AGE;
use outboxkit_core::{CatalogueMode, ErrorKind, NewEventType, NewMessage};
use serde_json::json;

use super::helpers::*;
use crate::conformance::Fixture;

fn order_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "required": ["id", "items"],
        "properties": {
            "id": {"type": "integer"},
            "items": {"type": "array", "items": {
                "type": "object",
                "required": ["price"],
                "properties": {"price": {"type": "number", "minimum": 0}}
            }}
        }
    })
}

async fn register(fx: &Fixture, t: &str, schema: Option<serde_json::Value>) {
    let mut n = NewEventType::new(topic(t), format!("the {t} event"));
    n.schema = schema;
    fx.store().put_event_type(&n).await.expect("put_event_type");
}

async fn set_mode(fx: &Fixture, mode: CatalogueMode) {
    fx.store()
        .set_catalogue_mode(mode)
        .await
        .expect("set_catalogue_mode");
}

/// Messages and deliveries written so far, over every tenant.
async fn written(fx: &Fixture) -> (u64, u64) {
    let tenants = fx.store().tenants().await.expect("tenants");
    let messages = tenants.iter().map(|t| t.messages).sum();
    let deliveries = fx.store().stats().await.expect("stats").total();
    (messages, deliveries)
}

/// Types read back equal what was put, by topic; a replacement keeps `created_at`; a
/// delete removes one; a missing one is `NotFound`.
pub async fn event_types_round_trip(fx: Fixture) {
    let s = fx.store();
    assert_eq!(s.catalogue_mode().await.expect("mode"), CatalogueMode::Off);
    assert!(s.list_event_types().await.expect("list").is_empty());
    let first = s
        .put_event_type(
            &NewEventType::new(topic("order.created"), "an order").schema(order_schema()),
        )
        .await
        .expect("put");
    let other = s
        .put_event_type(&NewEventType::new(topic("invoice.sent"), ""))
        .await
        .expect("put");
    assert_eq!(first.schema, Some(order_schema()));
    assert_eq!(
        s.get_event_type(&topic("order.created"))
            .await
            .expect("get"),
        first
    );
    assert_eq!(
        s.list_event_types().await.expect("list"),
        vec![other.clone(), first.clone()]
    );
    fx.clock().advance(secs(5));
    let replaced = s
        .put_event_type(&NewEventType::new(
            topic("order.created"),
            "an order, placed",
        ))
        .await
        .expect("replace");
    assert_eq!(replaced.created_at, first.created_at);
    assert!(replaced.updated_at > first.updated_at);
    assert_eq!(replaced.schema, None);
    assert_eq!(
        s.get_event_type(&topic("order.created"))
            .await
            .expect("get"),
        replaced
    );
    s.delete_event_type(&topic("invoice.sent"))
        .await
        .expect("delete");
    let gone = s.get_event_type(&topic("invoice.sent")).await.unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound);
    let again = s
        .delete_event_type(&topic("invoice.sent"))
        .await
        .unwrap_err();
    assert_eq!(again.kind(), ErrorKind::NotFound);
    assert_eq!(s.list_event_types().await.expect("list"), vec![replaced]);
    for m in CatalogueMode::ALL {
        s.set_catalogue_mode(m).await.expect("set mode");
        assert_eq!(s.catalogue_mode().await.expect("mode"), m);
    }
}

/// A schema that does not compile is `InvalidInput` and writes nothing (nor replaces the
/// type of its topic).
pub async fn event_type_with_a_bad_schema_writes_nothing(fx: Fixture) {
    let s = fx.store();
    register(&fx, "order.created", None).await;
    for bad in [json!({"type": 7}), json!([1, 2]), json!({"required": "id"})] {
        let n = NewEventType::new(topic("order.created"), "bad").schema(bad.clone());
        let e = s.put_event_type(&n).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (ErrorKind::InvalidInput, Some("schema")),
            "{bad}"
        );
        let n = NewEventType::new(topic("invoice.sent"), "bad").schema(bad);
        assert_eq!(
            s.put_event_type(&n).await.unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
    let kept = s.list_event_types().await.expect("list");
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].description, "the order.created event");
    assert_eq!(kept[0].schema, None);
}

/// In mode `off` an unknown topic and a payload that fails its schema are accepted.
pub async fn catalogue_off_accepts_anything(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    register(&fx, "order.created", Some(order_schema())).await;
    enqueue(&fx, NewMessage::new("not.registered", json!({"x": 1}))).await;
    enqueue(&fx, NewMessage::raw("order.created", b"not json".to_vec())).await;
    assert_eq!(written(&fx).await, (2, 2));
}

/// In `refuse-unknown` an unregistered topic is `InvalidInput` naming it, and nothing is
/// written; a registered one (schema or not, payload whatever) is accepted.
pub async fn refuse_unknown_refuses_and_writes_nothing(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    add_endpoint(&fx, "acme", "*").await;
    register(&fx, "order.created", Some(order_schema())).await;
    set_mode(&fx, CatalogueMode::RefuseUnknown).await;
    let m = NewMessage::new("order.paid", json!({"id": 1})).tenant("acme");
    let e = fx.store().enqueue(m).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (ErrorKind::InvalidInput, Some("topic"))
    );
    assert!(e.message().contains("order.paid"), "{e}");
    assert_eq!(written(&fx).await, (0, 0), "no message, no delivery");
    let ok = NewMessage::new("order.created", json!({"anything": true})).tenant("acme");
    assert_eq!(enqueue(&fx, ok).await.deliveries, 2);
    set_mode(&fx, CatalogueMode::Off).await;
    enqueue(&fx, NewMessage::new("order.paid", json!({}))).await;
    assert_eq!(written(&fx).await.0, 2);
}

/// A batch with one refused message writes none of it, in either mode that refuses.
pub async fn catalogue_refuses_a_batch_whole(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    register(&fx, "order.created", Some(order_schema())).await;
    let good = || NewMessage::new("order.created", json!({"id": 1, "items": []}));
    set_mode(&fx, CatalogueMode::RefuseUnknown).await;
    let batch = vec![good(), NewMessage::new("order.unknown", json!({})), good()];
    let e = fx.store().enqueue_batch(batch).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    set_mode(&fx, CatalogueMode::Validate).await;
    let bad = NewMessage::new("order.created", json!({"id": "one", "items": []}));
    let e = fx
        .store()
        .enqueue_batch(vec![good(), bad])
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (ErrorKind::InvalidInput, Some("payload"))
    );
    assert_eq!(written(&fx).await, (0, 0));
    let out = fx
        .store()
        .enqueue_batch(vec![good(), good()])
        .await
        .expect("a valid batch");
    assert_eq!(out.len(), 2);
    assert_eq!(written(&fx).await, (2, 2));
}

/// In `validate` a payload that fails its type's schema is `InvalidInput` naming the
/// failing instance path and rule, never a value; a valid one is accepted, and a type
/// without a schema accepts any payload.
pub async fn validate_refuses_a_failing_payload_naming_the_path(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    register(&fx, "order.created", Some(order_schema())).await;
    register(&fx, "order.noted", None).await;
    set_mode(&fx, CatalogueMode::Validate).await;
    let bad = json!({"id": 7, "items": [{"price": 1}, {"price": -4242}]});
    let e = fx
        .store()
        .enqueue(NewMessage::new("order.created", bad))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (ErrorKind::InvalidInput, Some("payload"))
    );
    assert!(e.message().contains("/items/1/price"), "{e}");
    assert!(e.message().contains("minimum"), "{e}");
    assert!(
        !e.to_string().contains("4242"),
        "no payload value in the error: {e}"
    );
    let missing = fx
        .store()
        .enqueue(NewMessage::new("order.created", json!({"id": 7})))
        .await
        .unwrap_err();
    assert!(missing.message().contains("required"), "{missing}");
    let raw = fx
        .store()
        .enqueue(NewMessage::raw("order.created", b"<xml/>".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(raw.field(), Some("payload"));
    assert_eq!(written(&fx).await, (0, 0));
    let good = json!({"id": 7, "items": [{"price": 0}, {"price": 12.5}]});
    enqueue(&fx, NewMessage::new("order.created", good)).await;
    enqueue(&fx, NewMessage::raw("order.noted", b"free text".to_vec())).await;
    assert_eq!(written(&fx).await, (2, 2));
}

/// A change made through a second handle on the same backend is enforced by the first: a
/// newly registered topic at once (a refusal is checked against a fresh read), a mode
/// turned on or a type deleted once the first handle's copy is older than its max age.
pub async fn a_catalogue_change_through_another_handle_is_enforced(fx: Fixture) {
    add_consumer(&fx, "worker", "*").await;
    let other = fx.second_handle().await;
    // The first handle reads the catalogue (mode off) and keeps it.
    enqueue(&fx, NewMessage::new("order.created", json!({}))).await;
    other
        .set_catalogue_mode(CatalogueMode::RefuseUnknown)
        .await
        .expect("mode");
    fx.clock().advance(CACHE_MAX_AGE + secs(1));
    let e = fx
        .store()
        .enqueue(NewMessage::new("order.created", json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidInput,
        "the mode set elsewhere is enforced"
    );
    other
        .put_event_type(&NewEventType::new(topic("order.created"), ""))
        .await
        .expect("put");
    enqueue(&fx, NewMessage::new("order.created", json!({}))).await;
    other
        .delete_event_type(&topic("order.created"))
        .await
        .expect("delete");
    fx.clock().advance(CACHE_MAX_AGE + secs(1));
    let e = fx
        .store()
        .enqueue_batch(vec![NewMessage::new("order.created", json!({}))])
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidInput,
        "the type deleted elsewhere is unknown"
    );
    assert_eq!(written(&fx).await, (2, 2));
}
