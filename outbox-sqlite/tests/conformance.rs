//! The whole conformance suite against `SqliteStore`, each case on a fresh temporary file,
//! with a second handle (its own connections) on the same file.

use std::sync::Arc;

use outboxkit_core::{OsEntropy, Store};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::conformance::Fixture;
use outboxkit_testing::ManualClock;

async fn setup(clock: Arc<ManualClock>) -> Option<Fixture> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = SqliteConfig::new(dir.path().join("outbox.db"));
    let store = SqliteStore::open(config.clone(), clock.clone(), Arc::new(OsEntropy))
        .await
        .expect("open the sqlite store");
    let reopen_clock = clock.clone();
    let fixture = Fixture::new(Arc::new(store.clone()), clock)
        .with_tokens(Arc::new(store.clone()))
        .with_console(Arc::new(store))
        .with_reopen(move || {
            let (config, clock) = (config.clone(), reopen_clock.clone());
            async move {
                let second = SqliteStore::open(config, clock, Arc::new(OsEntropy))
                    .await
                    .expect("open a second handle");
                Arc::new(second) as Arc<dyn Store>
            }
        })
        .with_cleanup(async move { drop(dir) });
    Some(fixture)
}

outboxkit_testing::conformance_tests!(setup);

outboxkit_testing::token_conformance_tests!(setup);

outboxkit_testing::console_conformance_tests!(setup);

/// The transaction cases: the caller's own connection on the store's file, its marker table
/// beside the store's tables, `enqueue_in` inside its `BEGIN IMMEDIATE` transaction.
mod txn {
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;
    use outboxkit_core::{Error, ErrorKind, NewMessage, OsEntropy, Result};
    use outboxkit_sqlite::rusqlite::{Connection, TransactionBehavior};
    use outboxkit_sqlite::{SqliteConfig, SqliteStore};
    use outboxkit_testing::conformance::txn::{TxnFixture, TxnHarness};
    use outboxkit_testing::conformance::Fixture;
    use outboxkit_testing::ManualClock;

    #[derive(Debug)]
    struct Harness {
        store: SqliteStore,
        path: PathBuf,
    }

    fn driver(e: outboxkit_sqlite::rusqlite::Error) -> Error {
        Error::new(
            ErrorKind::Unexpected,
            "the caller's sqlite connection failed",
        )
        .with_source(e)
    }

    fn app(path: &std::path::Path) -> Result<Connection> {
        let conn = Connection::open(path).map_err(driver)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(driver)?;
        conn.execute_batch("CREATE TABLE IF NOT EXISTS app_markers (name TEXT PRIMARY KEY)")
            .map_err(driver)?;
        Ok(conn)
    }

    #[async_trait]
    impl TxnHarness for Harness {
        async fn write_and_enqueue(
            &self,
            marker: &str,
            messages: Vec<NewMessage>,
            commit: bool,
        ) -> Result<()> {
            let (store, path, marker) = (self.store.clone(), self.path.clone(), marker.to_owned());
            tokio::task::spawn_blocking(move || {
                let mut conn = app(&path)?;
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(driver)?;
                tx.execute("INSERT INTO app_markers (name) VALUES (?1)", [&marker])
                    .map_err(driver)?;
                // On an error `tx` is dropped: rusqlite rolls it back.
                for m in messages {
                    store.enqueue_in(&tx, m)?;
                }
                if commit {
                    tx.commit().map_err(driver)?;
                    store.notify();
                } else {
                    tx.rollback().map_err(driver)?;
                }
                Ok(())
            })
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, "the harness task").with_source(e))?
        }

        async fn marker_exists(&self, marker: &str) -> Result<bool> {
            let (path, marker) = (self.path.clone(), marker.to_owned());
            tokio::task::spawn_blocking(move || {
                let conn = app(&path)?;
                conn.query_row(
                    "SELECT count(*) FROM app_markers WHERE name = ?1",
                    [&marker],
                    |r| r.get::<_, i64>(0),
                )
                .map(|n| n > 0)
                .map_err(driver)
            })
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, "the harness task").with_source(e))?
        }
    }

    async fn setup(clock: Arc<ManualClock>) -> Option<TxnFixture> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("outbox.db");
        let store = SqliteStore::open(SqliteConfig::new(&path), clock.clone(), Arc::new(OsEntropy))
            .await
            .expect("open the sqlite store");
        let harness = Arc::new(Harness {
            store: store.clone(),
            path,
        });
        let fx = Fixture::new(Arc::new(store), clock).with_cleanup(async move { drop(dir) });
        Some(TxnFixture { fx, harness })
    }

    outboxkit_testing::transaction_tests!(setup);
}
