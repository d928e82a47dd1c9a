//! The whole conformance suite against PostgreSQL, the model test, and the transaction cases
//! (`enqueue_in` in a `sqlx` transaction): each case in a fresh schema with a random name,
//! dropped afterwards.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{EntropyExt, Error, ErrorKind, NewMessage, OsEntropy, Store};
use outboxkit_postgres::sqlx::{
    self,
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_testing::conformance::txn::{TxnFixture, TxnHarness};
use outboxkit_testing::conformance::{backend_unavailable, Fixture};
use outboxkit_testing::ManualClock;

fn url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Small pools: the suite runs many cases at once against one server. Their sessions commit
/// without waiting for the WAL flush (`synchronous_commit = off`): what a commit makes
/// visible, and when, is unchanged; only the durability of the last commits if the server
/// itself crashed is given up, which no case checks. Every case migrates a fresh schema and
/// drops it, so these flush waits were most of a case's time on a busy disk.
async fn small_pool(url: &str) -> Result<PgPool, sqlx::Error> {
    let options = PgConnectOptions::from_str(url)?.options([("synchronous_commit", "off")]);
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
}

/// A migrated store in a fresh schema, the fixture around it (reopen, drop the schema at
/// clean-up), and the schema's name.
async fn fresh(clock: Arc<ManualClock>) -> Option<(Fixture, PostgresStore, String)> {
    let url = url();
    let pool = match small_pool(&url).await {
        Ok(p) => p,
        Err(e) => return backend_unavailable("postgres", e),
    };
    let schema = format!("outbox_test_{:016x}", OsEntropy.next_u64());
    // Every keyless batch is written with COPY (the store's default copies batches of 32
    // and more): the suite's batches then check the copy; batches with idempotency keys,
    // and `copy_enqueue.rs` beside the copy, check the batch statement.
    let config = PostgresConfig {
        copy_batches_from: 1,
        ..PostgresConfig::new(schema.clone())
    };
    let store = PostgresStore::new(
        pool.clone(),
        config.clone(),
        clock.clone(),
        Arc::new(OsEntropy),
    )
    .expect("a valid configuration");
    store.migrate().await.expect("the migrations apply");
    let reopen_clock = clock.clone();
    let reopen = move || {
        let (url, config, clock) = (url.clone(), config.clone(), reopen_clock.clone());
        async move {
            let pool = small_pool(&url).await.expect("a second pool");
            let store = PostgresStore::new(pool, config, clock, Arc::new(OsEntropy))
                .expect("a valid configuration");
            Arc::new(store) as Arc<dyn Store>
        }
    };
    let name = schema.clone();
    let cleanup = async move {
        let drop = format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE");
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(drop.to_string()))
            .execute(&pool)
            .await
        {
            eprintln!("could not drop test schema {name}: {e}");
        }
        pool.close().await;
    };
    let fx = Fixture::new(Arc::new(store.clone()), clock)
        .with_tokens(Arc::new(store.clone()))
        .with_console(Arc::new(store.clone()))
        .with_reopen(reopen)
        .with_cleanup(cleanup);
    Some((fx, store, schema))
}

async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
    fresh(clock).await.map(|(fx, _, _)| fx)
}

outboxkit_testing::conformance_tests!(setup);

outboxkit_testing::token_conformance_tests!(setup);

outboxkit_testing::console_conformance_tests!(setup);

/// The caller's transaction: a row in a marker table of the test's schema, then
/// `enqueue_in` of each message on the same `sqlx` transaction.
#[derive(Debug)]
struct PgTxn {
    store: PostgresStore,
    markers: String,
}

fn test_db(e: sqlx::Error) -> Error {
    Error::new(ErrorKind::Unavailable, "the test's own statement failed").with_source(e)
}

#[async_trait::async_trait]
impl TxnHarness for PgTxn {
    async fn write_and_enqueue(
        &self,
        marker: &str,
        messages: Vec<NewMessage>,
        commit: bool,
    ) -> outboxkit_core::Result<()> {
        let mut tx = self.store.pool().begin().await.map_err(test_db)?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {} (marker) VALUES ($1)",
            self.markers
        )))
        .bind(marker)
        .execute(&mut *tx)
        .await
        .map_err(test_db)?;
        for m in messages {
            // On an error, `?` drops the transaction: it rolls back.
            self.store.enqueue_in(&mut tx, m).await?;
        }
        if commit {
            tx.commit().await.map_err(test_db)
        } else {
            tx.rollback().await.map_err(test_db)
        }
    }

    async fn marker_exists(&self, marker: &str) -> outboxkit_core::Result<bool> {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE marker = $1)",
            self.markers
        )))
        .bind(marker)
        .fetch_one(self.store.pool())
        .await
        .map_err(test_db)
    }
}

async fn txn_setup(clock: Arc<ManualClock>) -> Option<TxnFixture> {
    let (fx, store, schema) = fresh(clock).await?;
    let markers = format!("\"{schema}\".txn_markers");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {markers} (marker text PRIMARY KEY)"
    )))
    .execute(store.pool())
    .await
    .expect("the marker table");
    Some(TxnFixture {
        fx,
        harness: Arc::new(PgTxn { store, markers }),
    })
}

outboxkit_testing::transaction_tests!(txn_setup);
