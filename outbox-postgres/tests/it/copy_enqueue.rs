//! A batch written with binary `COPY` (`PostgresConfig::copy_batches_from`) against the same
//! batch through the batch statement: the same messages and deliveries row by row (fan-out
//! order, groups, holds, barrier hashes, id layout, `seq` order across the batch) and the same
//! results; its wake-up at the caller's commit; a copy that fails leaves nothing; a batch with
//! an idempotency key is never copied.

use std::sync::Arc;

use outboxkit_core::{
    Clock, EndpointStatus, EndpointStore, ErrorKind, MessageStore, NewMessage, OsEntropy,
    SystemClock,
};
use outboxkit_postgres::sqlx::{self, postgres::PgPool};
use outboxkit_postgres::{PostgresConfig, PostgresStore};

use crate::sql_enqueue::{
    commit_wakes, endpoint, fanout_cases, routes, rows_of, with, Case, Written,
};
use crate::support::{count, with_db, TestDb};

/// A store on the test's schema that copies batches of at least `from` messages.
fn store_copying(db: &TestDb, pool: PgPool, from: usize) -> PostgresStore {
    let config = PostgresConfig {
        copy_batches_from: from,
        ..PostgresConfig::new(db.schema.clone())
    };
    PostgresStore::new(pool, config, Arc::new(SystemClock), Arc::new(OsEntropy))
        .expect("a valid configuration")
}

/// A migrated schema (the consumer `worker` subscribed) and a store on it that copies every
/// keyless batch.
async fn copying_store(db: &TestDb, app: &str) -> PostgresStore {
    let pool = db.pool(&db.app(app), 2).await;
    db.ready_store(pool.clone(), Arc::new(SystemClock)).await;
    store_copying(db, pool, 1)
}

/// `cases` as one `enqueue_batch_in` in a transaction rolled back afterwards: what each
/// message wrote, with the call's result, after checking that the deliveries' `seq` follows
/// the batch (every delivery of a message after those of the messages before it).
async fn batch(db: &TestDb, store: &PostgresStore, cases: &[Case]) -> Vec<Written> {
    let mut tx = store.pool().begin().await.unwrap();
    let got = store
        .enqueue_batch_in(&mut tx, cases.iter().map(Case::message).collect())
        .await
        .unwrap();
    assert_eq!(got.len(), cases.len());
    let mut out = Vec::new();
    for (e, case) in got.iter().zip(cases) {
        let mut w = rows_of(db, &mut tx, e.message_id.as_uuid(), case.available_at).await;
        w.deliveries = i64::from(e.deliveries);
        w.duplicate = e.duplicate;
        assert_eq!(w.rows.len() as i64, w.deliveries, "{case:?}");
        out.push(w);
    }
    let s = format!("\"{}\"", db.schema);
    let order: Vec<uuid::Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT message_id FROM {s}.queue ORDER BY seq"
    )))
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let mut by_message: Vec<uuid::Uuid> = order.clone();
    by_message.dedup();
    let sent: Vec<uuid::Uuid> = got
        .iter()
        .filter(|e| e.deliveries > 0)
        .map(|e| e.message_id.as_uuid())
        .collect();
    assert_eq!(by_message, sent, "deliveries in batch order");
    tx.rollback().await.unwrap();
    out
}

/// `sql_enqueue::fanout_cases`, and what reaches a strict-FIFO endpoint (keyed and not) and
/// the same recipient in another tenant, in one batch.
fn cases() -> Vec<Case> {
    let acme = |c: &mut Case| c.tenant = Some("acme".to_owned());
    let mut cases = fanout_cases();
    cases.extend([
        with(
            |c| {
                acme(c);
                c.ordering_key = Some("inv:7".to_owned());
            },
            "invoice.paid",
        ),
        with(acme, "invoice.paid"),
        with(
            |c| {
                c.ordering_key = Some("order:42".to_owned());
                c.recipients = vec!["a@example.com".to_owned()];
            },
            "order.created",
        ),
    ]);
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_batch_writes_what_the_batch_statement_writes() {
    with_db(|db| async move {
        let pool = db.pool(&db.app("copy"), 2).await;
        let statement = db.ready_store(pool.clone(), Arc::new(SystemClock)).await;
        routes(&statement).await;
        let mut fifo = endpoint(
            "acme",
            "invoice.*",
            EndpointStatus::Active,
            SystemClock.now(),
        );
        fifo.fifo = true;
        statement.create_endpoint(&fifo).await.unwrap();
        let statement = store_copying(&db, pool.clone(), usize::MAX);
        let copying = store_copying(&db, pool.clone(), 1);

        let cases = cases();
        let a = batch(&db, &statement, &cases).await;
        let b = batch(&db, &copying, &cases).await;
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x, y, "case {i}: {:?}", cases[i]);
        }
        // The forms are all there: held for ever and for a while, e-mail, a FIFO endpoint's
        // barrier (the same hash for both of its keyed and unkeyed deliveries).
        let all: Vec<_> = b.iter().flat_map(|w| &w.rows).collect();
        assert!(all.iter().any(|r| r.2 == 1 && r.3 == i64::MAX), "{all:?}");
        assert!(all.iter().any(|r| r.2 == 1 && r.3 != i64::MAX), "{all:?}");
        assert!(all.iter().any(|r| r.0 == "email"), "{all:?}");
        let fifo_id = fifo.id.to_string();
        let fifo_hashes: Vec<_> = all.iter().filter(|r| r.1 == fifo_id).map(|r| r.4).collect();
        // acme's three `invoice.paid` messages (one keyed).
        assert_eq!(fifo_hashes.len(), 3, "{all:?}");
        assert!(fifo_hashes
            .iter()
            .all(|h| h.is_some() && *h == fifo_hashes[0]));
        let nobody = cases
            .iter()
            .position(|c| c.tenant.as_deref() == Some("nobody"))
            .unwrap();
        assert_eq!(
            b[nobody].deliveries, 2,
            "a tenant without endpoints: the consumers"
        );

        // A batch with an idempotency key goes through the statement (a repeat in the batch
        // is its first message's duplicate), whatever the threshold.
        let keyed = [
            with(
                |c| c.idempotency_key = Some("k".to_owned()),
                "order.created",
            ),
            with(
                |c| c.idempotency_key = Some("k".to_owned()),
                "order.created",
            ),
            Case::new("order.created"),
        ];
        let got = copying
            .enqueue_batch(keyed.iter().map(Case::message).collect())
            .await
            .unwrap();
        assert!(!got[0].duplicate && got[1].duplicate && !got[2].duplicate);
        assert_eq!(got[1].message_id, got[0].message_id);
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_batch_wakes_listeners_at_commit() {
    with_db(|db| async move {
        let store = copying_store(&db, "copywake").await;
        let mut listener = sqlx::postgres::PgListener::connect_with(store.pool())
            .await
            .unwrap();
        listener.listen(&store.config().channel()).await.unwrap();
        let messages = || {
            (0..3)
                .map(|n| NewMessage::new("order.created", serde_json::json!(n)))
                .collect()
        };

        let mut tx = store.pool().begin().await.unwrap();
        store.enqueue_batch_in(&mut tx, messages()).await.unwrap();
        commit_wakes(&store, &mut listener, tx).await;

        // The store's own transaction: copied and counted like any batch.
        let got = store.enqueue_batch(messages()).await.unwrap();
        assert!(got.iter().all(|e| e.deliveries == 1 && !e.duplicate));
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.queue").await, 6);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_fails_leaves_nothing() {
    with_db(|db| async move {
        let store = copying_store(&db, "copyfail").await;
        let s = format!("\"{}\"", db.schema);
        // A constraint the copy's third row breaks (an operator's, standing in for any
        // failure halfway through the copy).
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {s}.messages ADD CONSTRAINT no_three CHECK (payload <> '3'::bytea)"
        )))
        .execute(&db.admin)
        .await
        .unwrap();
        let messages = (1..=4)
            .map(|n| NewMessage::new("order.created", serde_json::json!(n)))
            .collect();
        let err = store.enqueue_batch(messages).await.unwrap_err();
        // A check violation (23514), as the statement reports it.
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 0);
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.queue").await, 0);
        // The connection is usable afterwards: the next batch is written.
        let ok = (5..=6)
            .map(|n| NewMessage::new("order.created", serde_json::json!(n)))
            .collect();
        store.enqueue_batch(ok).await.unwrap();
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.queue").await, 2);
    })
    .await;
}
