//! Paused consumers through the dispatcher: a paused consumer's deliveries wait (held or,
//! for a delivery that was running when the pause landed, pending and left out of the
//! claim), nothing is lost and no attempt is spent; a restart's `register()` keeps the
//! pause; the resume delivers in order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{
    ConsumerName, ConsumerStatus, DeliveryStatus, Message, NewMessage, RetryPolicy, Store,
};
use outboxkit_dispatch::{Context, HandlerOptions, HandlerResult};

use crate::{world, BUDGET};

fn billing() -> ConsumerName {
    ConsumerName::new("billing").unwrap()
}

async fn set(store: &Arc<dyn Store>, status: ConsumerStatus) {
    store.set_consumer_status(&billing(), status).await.unwrap();
}

#[tokio::test]
async fn a_paused_consumer_gets_nothing_until_resumed_then_everything_in_order() {
    let w = world();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let d = w
        .builder()
        .handler("billing", "*", move |_c: Context, m: Message| {
            let s = s.clone();
            async move {
                s.lock()
                    .unwrap()
                    .push(m.json().unwrap()["i"].as_u64().unwrap());
                HandlerResult::Ok
            }
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    set(&w.store, ConsumerStatus::Paused).await;
    // A restart registers the consumer again: the pause stays.
    d.register().await.unwrap();
    for i in 0..3 {
        w.store
            .enqueue(NewMessage::new("a.b", serde_json::json!({ "i": i })).ordering_key("k"))
            .await
            .unwrap();
    }
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.claimed, r.succeeded), (0, 0), "{r:?}");
    assert!(seen.lock().unwrap().is_empty());
    for del in w.deliveries().await {
        assert_eq!((del.status, del.attempts), (DeliveryStatus::Held, 0));
    }

    set(&w.store, ConsumerStatus::Active).await;
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 3, "{r:?}");
    assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2], "in enqueue order");
    for del in w.deliveries().await {
        assert_eq!((del.status, del.attempts), (DeliveryStatus::Succeeded, 1));
    }
}

#[tokio::test]
async fn a_delivery_running_when_the_pause_lands_comes_back_and_waits() {
    let w = world();
    let calls = Arc::new(Mutex::new(0u32));
    let c = calls.clone();
    let store = w.store.clone();
    let d = w
        .builder()
        .handler_with(
            "billing",
            "*",
            move |_c: Context, _m: Message| {
                let c = c.clone();
                let store = store.clone();
                async move {
                    let first = {
                        let mut n = c.lock().unwrap();
                        *n += 1;
                        *n == 1
                    };
                    if first {
                        // The operator pauses the consumer while this attempt runs.
                        set(&store, ConsumerStatus::Paused).await;
                        HandlerResult::retry("not yet")
                    } else {
                        HandlerResult::Ok
                    }
                }
            },
            HandlerOptions {
                retry: RetryPolicy::schedule(vec![Duration::from_secs(10)])
                    .unwrap()
                    .with_max_attempts(5)
                    .unwrap(),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({})))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.retried, 1, "{r:?}");
    // The retry is due, but its consumer is paused: not claimed, nothing spent.
    w.advance(Duration::from_secs(3600));
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.claimed, r.succeeded), (0, 0), "{r:?}");
    assert_eq!(*calls.lock().unwrap(), 1);
    let one = w.one().await;
    assert_eq!((one.status, one.attempts), (DeliveryStatus::Pending, 1));

    set(&w.store, ConsumerStatus::Active).await;
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 1, "{r:?}");
    assert_eq!(*calls.lock().unwrap(), 2);
    assert_eq!(
        w.one().await.attempts,
        2,
        "one attempt per run of the handler"
    );
}
