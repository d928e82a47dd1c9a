//! `enqueue_in` inside a caller's `MULTI`, and idempotency under concurrent enqueues.

use std::collections::HashSet;

use outboxkit_core::OperatorStore;
use outboxkit_core::{DeliveryStore, ErrorKind, Ledger, MessageStore, NewMessage, TenantId};
use outboxkit_redis::EnqueueReply;
use outboxkit_testing::ManualClock;
use tokio::task::JoinSet;

use crate::common::{add_worker, admin, claim_request, isolated, store};

/// The caller's own `SET` and the enqueue run in one `MULTI`: both are applied, the
/// message fans out, and a second `enqueue_in` with the same idempotency key writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_multi_applies_both_writes() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let s = store(&prefix, clock.clone()).await;
        add_worker(&s, clock.as_ref()).await;
        let own_key = format!("{prefix}:app:order:42");

        let mut pipe = redis::pipe();
        pipe.atomic().set(&own_key, "paid").ignore();
        s.enqueue_in(
            &mut pipe,
            NewMessage::new("order.paid", serde_json::json!({ "id": 42 }))
                .idempotency_key("order-42-paid"),
        )
        .expect("enqueue_in");
        let (first,): (EnqueueReply,) = pipe.query_async(&mut s.connection()).await.expect("exec");
        assert!(!first.0.duplicate);
        assert_eq!(first.0.deliveries, 1);

        let value: Option<String> = redis::cmd("GET")
            .arg(&own_key)
            .query_async(&mut admin().await)
            .await
            .expect("get");
        assert_eq!(
            value.as_deref(),
            Some("paid"),
            "the caller's write was applied"
        );
        let m = s
            .get_message(&TenantId::default(), first.0.message_id)
            .await
            .expect("the message was written");
        assert_eq!(m.json().expect("json")["id"], 42);
        let claimed = s.claim(&claim_request(10)).await.expect("claim");
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].message.id, first.0.message_id);

        // The same key again, inside another transaction: the caller's write still happens,
        // the enqueue is a duplicate that writes nothing.
        let mut pipe = redis::pipe();
        pipe.atomic().set(&own_key, "paid-again").ignore();
        s.enqueue_in(
            &mut pipe,
            NewMessage::new("order.paid", serde_json::json!({ "id": 42 }))
                .idempotency_key("order-42-paid"),
        )
        .expect("enqueue_in");
        let (second,): (EnqueueReply,) = pipe.query_async(&mut s.connection()).await.expect("exec");
        assert!(second.0.duplicate);
        assert_eq!(second.0.deliveries, 0);
        assert_eq!(second.0.message_id, first.0.message_id);
        assert_eq!(s.stats().await.expect("stats").total(), 1);
    })
    .await;
}

/// A pipeline that is not a transaction is refused, and an invalid message adds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_refuses_non_atomic_pipelines_and_bad_input() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let s = store(&prefix, clock.clone()).await;
        let mut plain = redis::pipe();
        let e = s
            .enqueue_in(
                &mut plain,
                NewMessage::new("order.paid", serde_json::json!(1)),
            )
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (ErrorKind::InvalidInput, Some("pipeline"))
        );
        assert!(plain.is_empty(), "nothing was added");

        let mut pipe = redis::pipe();
        pipe.atomic();
        let e = s
            .enqueue_in(
                &mut pipe,
                NewMessage::new("Not A Topic", serde_json::json!(1)),
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(pipe.is_empty(), "nothing was added");
    })
    .await;
}

/// Many writers on several connections enqueue the same `(tenant, topic, key)` at once,
/// through `enqueue` and through `MULTI` pipelines: exactly one writes, every caller gets
/// that message's id, and exactly one delivery exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_of_one_key_write_once() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let first = store(&prefix, clock.clone()).await;
        add_worker(&first, clock.as_ref()).await;
        let mut tasks = JoinSet::new();
        for i in 0..4 {
            let s = store(&prefix, clock.clone()).await;
            for j in 0..8 {
                let s = s.clone();
                tasks.spawn(async move {
                    let m =
                        NewMessage::new("invoice.sent", serde_json::json!({ "writer": [i, j] }))
                            .tenant("acme")
                            .idempotency_key("invoice-7");
                    if j % 2 == 0 {
                        s.enqueue(m).await.expect("enqueue")
                    } else {
                        let mut pipe = redis::pipe();
                        pipe.atomic();
                        s.enqueue_in(&mut pipe, m).expect("enqueue_in");
                        let (r,): (EnqueueReply,) =
                            pipe.query_async(&mut s.connection()).await.expect("exec");
                        r.0
                    }
                });
            }
        }
        let mut results = Vec::new();
        while let Some(r) = tasks.join_next().await {
            results.push(r.expect("a writer task"));
        }
        let writers = results.iter().filter(|r| !r.duplicate).count();
        assert_eq!(writers, 1, "exactly one enqueue wrote: {results:?}");
        let ids: HashSet<_> = results.iter().map(|r| r.message_id).collect();
        assert_eq!(ids.len(), 1, "every caller got the same message id");
        assert_eq!(first.stats().await.expect("stats").pending, 1);
    })
    .await;
}
