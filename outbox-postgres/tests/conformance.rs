//! The whole conformance suite against PostgreSQL: each case in a fresh schema with a random
//! name, dropped afterwards.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{EntropyExt, OsEntropy, Store};
use outboxkit_postgres::sqlx::postgres::{PgPool, PgPoolOptions};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_testing::conformance::{backend_unavailable, Fixture};
use outboxkit_testing::ManualClock;

fn url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Small pools: the suite runs many cases at once against one server.
async fn small_pool(url: &str) -> Result<PgPool, outboxkit_postgres::sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect(url)
        .await
}

async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
    let url = url();
    let pool = match small_pool(&url).await {
        Ok(p) => p,
        Err(e) => return backend_unavailable("postgres", e),
    };
    let schema = format!("outbox_test_{:016x}", OsEntropy.next_u64());
    let config = PostgresConfig::new(schema.clone());
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
    let cleanup = async move {
        let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        if let Err(e) = outboxkit_postgres::sqlx::query(&drop).execute(&pool).await {
            eprintln!("could not drop test schema {schema}: {e}");
        }
        pool.close().await;
    };
    Some(
        Fixture::new(Arc::new(store.clone()), clock)
            .with_tokens(Arc::new(store))
            .with_reopen(reopen)
            .with_cleanup(cleanup),
    )
}

outboxkit_testing::conformance_tests!(setup);
