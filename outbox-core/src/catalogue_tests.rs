use serde_json::json;

use super::*;

fn t(s: &str) -> Topic {
    Topic::new(s).unwrap()
}

fn ty(topic: &str, schema: Option<serde_json::Value>) -> EventType {
    let now = Timestamp::from_unix_millis(1).unwrap();
    EventType {
        topic: t(topic),
        description: String::new(),
        schema,
        created_at: now,
        updated_at: now,
    }
}

#[test]
fn modes_parse_and_print() {
    for m in CatalogueMode::ALL {
        assert_eq!(m.as_str().parse::<CatalogueMode>().unwrap(), m);
    }
    assert_eq!(
        "strict".parse::<CatalogueMode>().unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(CatalogueMode::default(), CatalogueMode::Off);
}

#[test]
fn a_schema_that_does_not_compile_is_invalid_input() {
    for bad in [
        json!({"type": 12}),
        json!([1]),
        json!("x"),
        json!({"minimum": "a"}),
    ] {
        let e = NewEventType::new(t("a.b"), "")
            .schema(bad.clone())
            .validate()
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (ErrorKind::InvalidInput, Some("schema")),
            "{bad}"
        );
    }
    let remote = json!({"$ref": "https://example.com/schema.json"});
    assert!(NewEventType::new(t("a.b"), "")
        .schema(remote)
        .validate()
        .is_err());
    assert!(NewEventType::new(t("a.b"), "x".repeat(1001))
        .validate()
        .is_err());
    assert!(NewEventType::new(t("a.b"), "x\u{7}").validate().is_err());
    assert!(NewEventType::new(t("a.b"), "fine")
        .schema(json!(true))
        .validate()
        .is_ok());
}

#[test]
fn validate_names_the_path_and_rule_never_the_value() {
    let schema = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "object", "properties": {"price": {"type": "number", "minimum": 0}}}}}
    });
    let c = Catalogue::new(
        CatalogueMode::Validate,
        vec![ty("order.created", Some(schema))],
    )
    .unwrap();
    let e = c
        .check(&t("order.created"), br#"{"items": [{"price": -31337}]}"#)
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (ErrorKind::InvalidInput, Some("payload"))
    );
    assert!(e.message().contains("/items/0/price"), "{e}");
    assert!(e.message().contains("minimum"), "{e}");
    assert!(!e.to_string().contains("31337"), "{e}");
    assert!(c
        .check(&t("order.created"), br#"{"items": [{"price": 3}]}"#)
        .is_ok());
    let e = c.check(&t("order.created"), b"not json").unwrap_err();
    assert_eq!(e.field(), Some("payload"));
}

#[test]
fn modes_decide_what_is_refused() {
    let schema = Some(json!({"type": "object"}));
    let types = || {
        vec![
            ty("order.created", schema.clone()),
            ty("invoice.sent", None),
        ]
    };
    let off = Catalogue::new(CatalogueMode::Off, types()).unwrap();
    assert!(off.check(&t("any.thing"), b"[]").is_ok());
    let refuse = Catalogue::new(CatalogueMode::RefuseUnknown, types()).unwrap();
    assert_eq!(
        refuse.check(&t("any.thing"), b"{}").unwrap_err().field(),
        Some("topic")
    );
    assert!(refuse.check(&t("order.created"), b"[]").is_ok());
    let validate = Catalogue::new(CatalogueMode::Validate, types()).unwrap();
    assert!(validate.check(&t("order.created"), b"[]").is_err());
    assert!(validate.check(&t("invoice.sent"), b"[]").is_ok());
}

#[test]
fn filters_are_checked_against_the_registered_topics() {
    let c = Catalogue::new(
        CatalogueMode::RefuseUnknown,
        vec![ty("order.created", None)],
    )
    .unwrap();
    for ok in ["*", "order.created", "order.*", "order.created,*"] {
        assert!(
            c.check_filter(&TopicFilter::parse(ok).unwrap()).is_ok(),
            "{ok}"
        );
    }
    for bad in [
        "order.paid",
        "invoice.*",
        "order.created.*",
        "order.created,x.y",
    ] {
        let e = c
            .check_filter(&TopicFilter::parse(bad).unwrap())
            .unwrap_err();
        assert_eq!(e.field(), Some("filter"), "{bad}");
    }
    let off = Catalogue::off();
    assert!(off
        .check_filter(&TopicFilter::parse("x.y").unwrap())
        .is_ok());
}

#[test]
fn the_cache_is_fresh_for_its_max_age() {
    let cache = CatalogueCache::default();
    let t0 = Timestamp::from_unix_millis(10_000).unwrap();
    assert!(cache.fresh(t0).is_none());
    cache.keep(Catalogue::off(), t0);
    assert!(cache
        .fresh(t0.saturating_add(Duration::from_millis(999)))
        .is_some());
    assert!(cache.fresh(t0.saturating_add(CACHE_MAX_AGE)).is_none());
    assert!(cache.last().is_some());
    cache.forget();
    assert!(cache.last().is_none());
}
