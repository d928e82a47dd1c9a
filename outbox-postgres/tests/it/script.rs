//! The migrations as SQL for users' own tooling: the script builds the same schema that
//! `migrate()` builds, records what it applied so `migrate()` finds nothing left, runs twice
//! without harm, and the store works on it.

use std::sync::Arc;

use outboxkit_core::DeliveryStoreExt;
use outboxkit_core::{DeliveryStore, MessageStore, SystemClock};
use outboxkit_postgres::{migration_script, migrations, sqlx};

use crate::support::{claim_request, order, success, with_db};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_script_builds_what_migrate_builds() {
    with_db(|db| async move {
        let script = migration_script(&db.schema).expect("a valid schema name");
        // Twice: the second run finds every version recorded and changes nothing.
        for _ in 0..2 {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("BEGIN;\n{script}\nCOMMIT;")))
                .execute(&db.admin)
                .await
                .expect("the script runs");
        }
        let recorded: Vec<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT version FROM \"{}\".schema_migrations ORDER BY version",
            db.schema
        )))
        .fetch_all(&db.admin)
        .await
        .unwrap();
        let shipped: Vec<i32> = migrations().iter().map(|m| m.version).collect();
        assert_eq!(recorded, shipped);

        let pool = db.pool("script", 4).await;
        let store = db.ready_store(pool, Arc::new(SystemClock)).await;
        // `ready_store` called migrate(): nothing was left for it.
        assert_eq!(store.migrate().await.unwrap(), 0);
        store.enqueue(order(1)).await.unwrap();
        let claimed = store.claim(&claim_request(10)).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let now = outboxkit_core::Clock::now(&SystemClock);
        store
            .complete(&claimed[0].lease, &success(now))
            .await
            .unwrap();
    })
    .await;
}

#[test]
fn a_bad_schema_name_gets_no_sql() {
    let err = migration_script("x\"; DROP TABLE y; --").unwrap_err();
    assert_eq!(err.kind(), outboxkit_core::ErrorKind::Misconfigured);
    assert!(migrations()[0].sql("Robert'); --").is_err());
    assert!(migrations()[0]
        .sql("billing")
        .unwrap()
        .contains("\"billing\"."));
}
