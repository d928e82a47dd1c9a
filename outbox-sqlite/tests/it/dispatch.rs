//! The dispatcher of `outboxkit-core` running on `SqliteStore`: a message enqueued in the
//! application's transaction reaches its handler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{DynStore, Ledger, Message, NewMessage};
use outboxkit_dispatch::{Context, Dispatcher, HandlerResult};
use outboxkit_testing::ManualClock;
use rusqlite::{Connection, TransactionBehavior};

use crate::common::open;

#[tokio::test(flavor = "multi_thread")]
async fn run_once_delivers_what_a_transaction_enqueued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let clock = ManualClock::new();
    let store = open(&path, clock.clone()).await;
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let dispatcher = Dispatcher::builder(Arc::new(store.clone()) as Arc<DynStore>)
        .clock(clock.clone())
        .handler("mailer", "order.*", move |_ctx: Context, m: Message| {
            let counter = counter.clone();
            async move {
                let id = m.json().map(|v| v["id"].as_u64().unwrap_or(0)).unwrap_or(0);
                counter.fetch_add(id, Ordering::SeqCst);
                HandlerResult::Ok
            }
        })
        .build()
        .unwrap();
    // Persist the consumer before the first enqueue, so fan-out sees it.
    dispatcher.register().await.unwrap();

    let mut conn = Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let e = store
        .enqueue_in(
            &tx,
            NewMessage::new("order.created", serde_json::json!({"id": 42})),
        )
        .unwrap();
    tx.commit().unwrap();
    store.notify();

    let report = dispatcher.run_once(Duration::from_secs(60)).await.unwrap();
    assert_eq!((report.claimed, report.succeeded), (1, 1), "{report:?}");
    assert_eq!(seen.load(Ordering::SeqCst), 42);
    let page = store
        .list_deliveries(
            &Default::default(),
            &Default::default(),
            outboxkit_core::PageRequest::first(10),
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].message_id, e.message_id);
    assert_eq!(
        page.items[0].status,
        outboxkit_core::DeliveryStatus::Succeeded
    );
}

/// A consumer paused while its delivery runs: the retry comes back pending and the
/// dispatcher leaves it alone (not claimed, no attempt spent) until the resume; what is
/// enqueued meanwhile waits held; after the resume both are delivered.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_consumer_is_not_claimed_until_resumed() {
    use outboxkit_core::{
        ConsumerName, ConsumerStatus, DeliveryStatus, EndpointStore, MessageStore,
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let store = open(&dir.path().join("app.db"), clock.clone()).await;
    let calls = Arc::new(AtomicU64::new(0));
    let (c, s) = (calls.clone(), store.clone());
    let name = ConsumerName::new("mailer").unwrap();
    let n = name.clone();
    let dispatcher = Dispatcher::builder(Arc::new(store.clone()) as Arc<DynStore>)
        .clock(clock.clone())
        .handler("mailer", "*", move |_ctx: Context, _m: Message| {
            let (c, s, n) = (c.clone(), s.clone(), n.clone());
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    s.set_consumer_status(&n, ConsumerStatus::Paused)
                        .await
                        .unwrap();
                    HandlerResult::retry("paused meanwhile")
                } else {
                    HandlerResult::Ok
                }
            }
        })
        .build()
        .unwrap();
    dispatcher.register().await.unwrap();
    store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})))
        .await
        .unwrap();
    let r = dispatcher.run_once(Duration::from_secs(60)).await.unwrap();
    assert_eq!(r.retried, 1, "{r:?}");
    store
        .enqueue(NewMessage::new("order.updated", serde_json::json!({})))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(24 * 3600));
    let r = dispatcher.run_once(Duration::from_secs(60)).await.unwrap();
    assert_eq!((r.claimed, r.succeeded), (0, 0), "{r:?}");
    let statuses = |store: outboxkit_sqlite::SqliteStore| async move {
        let mut v: Vec<_> = store
            .list_deliveries(
                &Default::default(),
                &Default::default(),
                outboxkit_core::PageRequest::first(10),
            )
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|d| (d.status, d.attempts))
            .collect();
        v.sort_by_key(|(s, a)| (s.as_str(), *a));
        v
    };
    assert_eq!(
        statuses(store.clone()).await,
        vec![(DeliveryStatus::Held, 0), (DeliveryStatus::Pending, 1)]
    );
    dispatcher.register().await.unwrap();
    store
        .set_consumer_status(&name, ConsumerStatus::Active)
        .await
        .unwrap();
    let r = dispatcher.run_once(Duration::from_secs(60)).await.unwrap();
    assert_eq!(r.succeeded, 2, "{r:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        statuses(store).await,
        vec![
            (DeliveryStatus::Succeeded, 1),
            (DeliveryStatus::Succeeded, 2)
        ]
    );
}
