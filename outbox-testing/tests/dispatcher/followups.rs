//! Follow-up messages emitted by handlers: the tenant they inherit, the topics they may use.

use std::sync::{Arc, Mutex};

use outboxkit_core::{
    DeliveryFilter, ErrorKind, Message, NewMessage, PageRequest, TenantId, TopicFilter,
};
use outboxkit_dispatch::{Context, HandlerOptions, HandlerResult};

use crate::{world, BUDGET};

type Seen = Arc<Mutex<Vec<Result<(), (ErrorKind, Option<&'static str>)>>>>;

/// A handler of `order.created` that emits `order.billed` (and `audit.note` when told), with
/// no tenant named, recording what each emit returned.
fn emitter(seen: Seen, also: Option<&'static str>) -> impl outboxkit_dispatch::Handler {
    move |ctx: Context, _m: Message| {
        let seen = seen.clone();
        async move {
            let mut topics = vec!["order.billed"];
            topics.extend(also);
            for t in topics {
                let r = ctx
                    .emit(NewMessage::new(t, serde_json::json!({})))
                    .await
                    .map(|_| ())
                    .map_err(|e| (e.kind(), e.field()));
                seen.lock().unwrap().push(r);
            }
            HandlerResult::Ok
        }
    }
}

async fn messages_of(w: &crate::World, tenant: &TenantId) -> Vec<Message> {
    let page = w
        .store
        .list_deliveries(tenant, &DeliveryFilter::default(), PageRequest::first(100))
        .await
        .unwrap();
    let mut out = Vec::new();
    for d in page.items {
        out.push(w.store.get_message(tenant, d.message_id).await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_follow_up_inherits_the_tenant_and_cause_of_its_message() {
    let w = world();
    let seen: Seen = Arc::default();
    let d = w
        .builder()
        .handler("biller", "order.created", emitter(seen.clone(), None))
        .handler("ledger", "order.billed", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    let acme = TenantId::new("acme").unwrap();
    let original = w
        .store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})).tenant("acme"))
        .await
        .unwrap();
    d.run_once(BUDGET).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![Ok(())]);
    let follow: Vec<Message> = messages_of(&w, &acme)
        .await
        .into_iter()
        .filter(|m| m.topic.as_str() == "order.billed")
        .collect();
    assert_eq!(follow.len(), 1, "the follow-up is in the handler's tenant");
    assert_eq!(follow[0].tenant, acme);
    let cause = follow[0].cause.clone().unwrap();
    assert_eq!(cause.message_id, original.message_id);
    assert_eq!(cause.depth, 1);
    assert!(
        messages_of(&w, &TenantId::default()).await.is_empty(),
        "nothing is written into the default tenant"
    );
}

#[tokio::test]
async fn a_tenant_named_by_the_handler_wins() {
    let w = world();
    let d = w
        .builder()
        .handler(
            "router",
            "order.created",
            |ctx: Context, _m: Message| async move {
                ctx.emit(NewMessage::new("order.routed", serde_json::json!({})).tenant("globex"))
                    .await
                    .unwrap();
                HandlerResult::Ok
            },
        )
        .handler("sink", "order.routed", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})).tenant("acme"))
        .await
        .unwrap();
    d.run_once(BUDGET).await.unwrap();
    let globex = messages_of(&w, &TenantId::new("globex").unwrap()).await;
    assert_eq!(globex.len(), 1);
    assert_eq!(globex[0].topic.as_str(), "order.routed");
}

#[tokio::test]
async fn a_topic_outside_the_declared_emits_is_refused_and_writes_nothing() {
    let w = world();
    let seen: Seen = Arc::default();
    let d = w
        .builder()
        .handler_with(
            "biller",
            "order.created",
            emitter(seen.clone(), Some("audit.note")),
            HandlerOptions {
                emits: Some(TopicFilter::parse("order.*").unwrap()),
                ..HandlerOptions::default()
            },
        )
        .handler("sink", "*", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})))
        .await
        .unwrap();
    d.run_once(BUDGET).await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![Ok(()), Err((ErrorKind::InvalidInput, Some("topic")))]
    );
    let topics: Vec<String> = messages_of(&w, &TenantId::default())
        .await
        .iter()
        .map(|m| m.topic.as_str().to_owned())
        .collect();
    assert!(!topics.iter().any(|t| t == "audit.note"), "{topics:?}");
    assert!(topics.iter().any(|t| t == "order.billed"), "{topics:?}");
}
