//! Enqueue inside the caller's transaction, bulk enqueue, and migrations.

use std::collections::HashSet;
use std::sync::Arc;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    DeliveryStore, ErrorKind, Ledger, MessageStore, NewMessage, SystemClock, TenantId,
};
use outboxkit_postgres::sqlx;

use crate::support::{claim_request, count, order, with_db};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_commits_with_the_callers_transaction() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("tx"), 2).await, Arc::new(SystemClock))
            .await;
        let orders = format!("\"{}\".orders", db.schema);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {orders} (id bigint PRIMARY KEY)"
        )))
        .execute(store.pool())
        .await
        .unwrap();

        let mut tx = store.pool().begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {orders} (id) VALUES (1)"
        )))
        .execute(&mut *tx)
        .await
        .unwrap();
        let e = store.enqueue_in(&mut tx, order(1)).await.unwrap();
        assert_eq!((e.deliveries, e.duplicate), (1, false));
        // Not visible outside the transaction before it commits.
        assert_eq!(store.stats().await.unwrap().pending, 0);
        tx.commit().await.unwrap();

        let m = store
            .get_message(&TenantId::default(), e.message_id)
            .await
            .unwrap();
        assert_eq!(m.json().unwrap()["n"], 1);
        let claimed = store.claim(&claim_request(10)).await.unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].message.id, e.message_id);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_rolled_back_leaves_nothing() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("rb"), 2).await, Arc::new(SystemClock))
            .await;
        let mut tx = store.pool().begin().await.unwrap();
        let one = store.enqueue_in(&mut tx, order(1)).await.unwrap();
        let batch = store
            .enqueue_batch_in(&mut tx, vec![order(2), order(3).email("a@example.com")])
            .await
            .unwrap();
        assert_eq!(batch[1].deliveries, 2);
        tx.rollback().await.unwrap();

        let err = store
            .get_message(&TenantId::default(), one.message_id)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(store.stats().await.unwrap().total(), 0);
        assert!(store.claim(&claim_request(10)).await.unwrap().is_empty());
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 0);
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.queue").await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_inside_a_transaction_does_not_abort_it() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("dup"), 2).await, Arc::new(SystemClock))
            .await;
        // An earlier, committed message with the key.
        let first = store
            .enqueue(order(1).idempotency_key("order-1"))
            .await
            .unwrap();
        let mut tx = store.pool().begin().await.unwrap();
        let again = store
            .enqueue_in(&mut tx, order(1).idempotency_key("order-1"))
            .await
            .unwrap();
        assert!(again.duplicate);
        assert_eq!(again.message_id, first.message_id);
        let in_batch = store
            .enqueue_batch_in(
                &mut tx,
                vec![
                    order(2).idempotency_key("order-2"),
                    order(2).idempotency_key("order-2"),
                    order(1).idempotency_key("order-1"),
                ],
            )
            .await
            .unwrap();
        assert!(!in_batch[0].duplicate);
        assert_eq!(in_batch[1].message_id, in_batch[0].message_id);
        assert!(in_batch[1].duplicate && in_batch[2].duplicate);
        assert_eq!(in_batch[2].message_id, first.message_id);
        // The transaction is still usable.
        sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 2);
        assert_eq!(store.stats().await.unwrap().pending, 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_enqueue_of_ten_thousand_in_one_call() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("bulk"), 2).await, Arc::new(SystemClock))
            .await;
        let messages: Vec<NewMessage> = (0..10_000)
            .map(|n| {
                let m = order(n).tenant(format!("t{}", n % 7));
                if n % 10 == 0 {
                    m.email(format!("user{n}@example.com"))
                } else {
                    m
                }
            })
            .collect();
        let out = store.enqueue_batch(messages).await.unwrap();
        assert_eq!(out.len(), 10_000);
        assert!(out.iter().all(|e| !e.duplicate));
        for (n, e) in out.iter().enumerate() {
            let want = if n % 10 == 0 { 2 } else { 1 };
            assert_eq!(e.deliveries, want, "message {n}");
        }
        let ids: HashSet<_> = out.iter().map(|e| e.message_id).collect();
        assert_eq!(ids.len(), 10_000);
        assert_eq!(store.stats().await.unwrap().pending, 11_000);
        assert_eq!(
            count(&db, "SELECT count(DISTINCT id) FROM {s}.queue").await,
            11_000
        );
        // Enqueue order is kept: sequences follow the batch order.
        let m = store
            .get_message(&TenantId::new("t3").unwrap(), out[9_999].message_id)
            .await
            .unwrap();
        assert_eq!(m.json().unwrap()["n"], 9_999);
        let first = store.claim(&claim_request(1)).await.unwrap();
        assert_eq!(first[0].message.id, out[0].message_id);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_apply_once() {
    with_db(|db| async move {
        let pool = db.pool(&db.app("mig"), 8).await;
        let stores: Vec<_> = (0..6)
            .map(|_| db.store(pool.clone(), Arc::new(SystemClock)))
            .collect();
        let applied = futures::future::join_all(stores.iter().map(|s| s.migrate())).await;
        let applied: Vec<u32> = applied.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(applied.iter().filter(|&&n| n > 0).count(), 1, "{applied:?}");
        assert_eq!(stores[0].migrate().await.unwrap(), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_schema_is_misconfigured() {
    with_db(|db| async move {
        let store = db.store(db.pool(&db.app("unmig"), 1).await, Arc::new(SystemClock));
        let err = store.stats().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Misconfigured, "{err:?}");
    })
    .await;
}
