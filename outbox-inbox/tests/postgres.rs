//! The inbox on a real PostgreSQL: the record commits with the effect or not at all, and
//! concurrent duplicates run the handler exactly once.

mod common;

use std::time::Duration;

use common::{inbox, secret, signed, NOW_S};
use outboxkit_inbox::postgres::InboxTable;
use outboxkit_inbox::{Received, Recorded};
use outboxkit_testing::conformance::backend_unavailable;
use sqlx::postgres::{PgPool, PgPoolOptions};

fn url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh schema with the inbox table and an `effects` table the handler writes.
async fn setup(name: &str) -> Option<(PgPool, InboxTable, String)> {
    let pool = match PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url())
        .await
    {
        Ok(p) => p,
        Err(e) => return backend_unavailable("postgres", e),
    };
    let schema = format!("inbox_{name}_{}", std::process::id());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let table = InboxTable::new(&schema, "inbox", "orders").unwrap();
    table.migrate(&pool).await.unwrap();
    table
        .migrate(&pool)
        .await
        .expect("migrating twice is a no-op");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE \"{schema}\".effects (webhook_id text NOT NULL, body bytea NOT NULL)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    Some((pool, table, schema))
}

async fn effects(pool: &PgPool, schema: &str, id: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{schema}\".effects WHERE webhook_id = $1"
    )))
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn event(id: &str) -> Received {
    let body = format!("{{\"id\":\"{id}\"}}").into_bytes();
    let h = signed(&secret(), id, NOW_S, &body);
    inbox().check(&h[..], &body).unwrap()
}

/// Apply `e` as an application would: record, then the effect, in one transaction.
async fn apply(
    pool: &PgPool,
    table: &InboxTable,
    schema: &str,
    e: &Received,
    commit: bool,
) -> Recorded {
    let mut tx = pool.begin().await.unwrap();
    let r = table.record(&mut tx, e, NOW_S * 1000).await.unwrap();
    if r == Recorded::First {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO \"{schema}\".effects VALUES ($1, $2)"
        )))
        .bind(&e.id)
        .bind(&e.body)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
    r
}

#[tokio::test]
async fn a_rolled_back_effect_leaves_no_record_and_a_committed_one_is_never_applied_again() {
    let Some((pool, table, schema)) = setup("once").await else {
        return;
    };
    let e = event("msg_1");
    assert_eq!(
        apply(&pool, &table, &schema, &e, false).await,
        Recorded::First
    );
    assert_eq!(
        effects(&pool, &schema, "msg_1").await,
        0,
        "rolled back: nothing"
    );
    assert_eq!(
        apply(&pool, &table, &schema, &e, true).await,
        Recorded::First,
        "the retry applies it"
    );
    for _ in 0..3 {
        assert_eq!(
            apply(&pool, &table, &schema, &e, true).await,
            Recorded::Duplicate
        );
    }
    assert_eq!(effects(&pool, &schema, "msg_1").await, 1);
    let other_sender = InboxTable::new(&schema, "inbox", "billing").unwrap();
    assert_eq!(
        apply(&pool, &other_sender, &schema, &e, true).await,
        Recorded::First,
        "the same id from another sender is another message"
    );
}

#[tokio::test]
async fn concurrent_duplicates_run_the_handler_exactly_once() {
    let Some((pool, table, schema)) = setup("race").await else {
        return;
    };
    for (n, first_commits) in [(1, true), (2, false)] {
        let e = event(&format!("msg_race_{n}"));
        // The first transaction records and holds its lock while the second tries.
        let mut first = pool.begin().await.unwrap();
        assert_eq!(
            table.record(&mut first, &e, 0).await.unwrap(),
            Recorded::First
        );
        let (p2, t2, s2, e2) = (pool.clone(), table.clone(), schema.clone(), e.clone());
        let second = tokio::spawn(async move { apply(&p2, &t2, &s2, &e2, true).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !second.is_finished(),
            "the second waits on the first's record"
        );
        if first_commits {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO \"{schema}\".effects VALUES ($1, $2)"
            )))
            .bind(&e.id)
            .bind(&e.body)
            .execute(&mut *first)
            .await
            .unwrap();
            first.commit().await.unwrap();
            assert_eq!(second.await.unwrap(), Recorded::Duplicate);
        } else {
            first.rollback().await.unwrap();
            assert_eq!(
                second.await.unwrap(),
                Recorded::First,
                "the first gave it up"
            );
        }
        assert_eq!(effects(&pool, &schema, &e.id).await, 1, "round {n}");
    }
}

#[tokio::test]
async fn purge_removes_old_records_in_bounded_batches() {
    let Some((pool, table, schema)) = setup("purge").await else {
        return;
    };
    let mut tx = pool.begin().await.unwrap();
    for i in 0..25 {
        table
            .record(&mut tx, &event(&format!("old_{i}")), 1_000)
            .await
            .unwrap();
    }
    table.record(&mut tx, &event("new"), 5_000).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(table.purge(&pool, 2_000, 10).await.unwrap(), 10);
    assert_eq!(table.purge(&pool, 2_000, 10).await.unwrap(), 10);
    assert_eq!(table.purge(&pool, 2_000, 10).await.unwrap(), 5);
    assert_eq!(table.purge(&pool, 2_000, 10).await.unwrap(), 0);
    assert_eq!(
        apply(&pool, &table, &schema, &event("new"), true).await,
        Recorded::Duplicate,
        "a record inside the window stays"
    );
}

#[test]
fn a_table_name_that_is_not_an_identifier_is_refused() {
    for (schema, table) in [("app", "in box"), ("a\"; DROP", "inbox"), ("", "inbox")] {
        let e = InboxTable::new(schema, table, "s").unwrap_err();
        assert!(e.to_string().contains("not a plain identifier"), "{e}");
    }
}
