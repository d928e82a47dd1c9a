//! A fresh schema per test, pools with an `application_name`, and small builders.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use outboxkit_core::{
    AttemptDetail, AttemptOutcome, AttemptRecord, AttemptTiming, ClaimRequest, Clock, Completion,
    Consumer, ConsumerName, EntropyExt, NewMessage, OsEntropy, Timestamp, TopicFilter, Verdict,
};
use outboxkit_postgres::sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_testing::conformance::backend_unavailable;

/// The lease every test claims with.
pub const LEASE: Duration = Duration::from_secs(60);

/// The database of one test: a fresh schema, and an admin pool outside the store's pools.
#[derive(Debug)]
pub struct TestDb {
    pub url: String,
    pub schema: String,
    pub admin: PgPool,
}

impl TestDb {
    /// A pool whose connections carry `application_name = app`.
    pub async fn pool(&self, app: &str, max: u32) -> PgPool {
        let options = PgConnectOptions::from_str(&self.url)
            .expect("a valid test url")
            .application_name(app);
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .expect("a test pool")
    }

    /// A store on `pool` over this test's schema.
    pub fn store(&self, pool: PgPool, clock: Arc<dyn Clock>) -> PostgresStore {
        PostgresStore::new(
            pool,
            PostgresConfig::new(self.schema.clone()),
            clock,
            Arc::new(OsEntropy),
        )
        .expect("a valid configuration")
    }

    /// A migrated store with the consumer `worker` subscribed to everything.
    pub async fn ready_store(&self, pool: PgPool, clock: Arc<dyn Clock>) -> PostgresStore {
        let store = self.store(pool, clock.clone());
        store.migrate().await.expect("migrate");
        let worker = Consumer {
            name: worker(),
            filter: TopicFilter::all(),
            created_at: clock.now(),
            status: outboxkit_core::ConsumerStatus::Active,
        };
        outboxkit_core::EndpointStore::put_consumer(&store, &worker)
            .await
            .expect("put_consumer");
        store
    }

    /// A name unique to this test, for `application_name`.
    pub fn app(&self, what: &str) -> String {
        format!("{}_{what}", self.schema)
    }
}

fn url() -> String {
    std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Run `body` against a fresh schema, dropped afterwards even when `body` panics. Skips
/// (loudly) when PostgreSQL is unreachable, unless `OUTBOX_TEST_REQUIRE_BACKENDS=1`.
pub async fn with_db<F, Fut>(body: F)
where
    F: FnOnce(Arc<TestDb>) -> Fut,
    Fut: Future<Output = ()>,
{
    let url = url();
    let admin = match PgPoolOptions::new().max_connections(2).connect(&url).await {
        Ok(p) => p,
        Err(e) => {
            backend_unavailable::<()>("postgres", e);
            return;
        }
    };
    let db = Arc::new(TestDb {
        url,
        schema: format!("outbox_it_{:016x}", OsEntropy.next_u64()),
        admin,
    });
    let result = AssertUnwindSafe(body(db.clone())).catch_unwind().await;
    let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", db.schema);
    if let Err(e) = outboxkit_postgres::sqlx::query(sqlx::AssertSqlSafe(drop.to_string()))
        .execute(&db.admin)
        .await
    {
        eprintln!("could not drop test schema {}: {e}", db.schema);
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The consumer every test delivers to.
pub fn worker() -> ConsumerName {
    ConsumerName::new("worker").expect("a valid consumer name")
}

/// A claim of up to `batch` deliveries to `worker`.
pub fn claim_request(batch: u32) -> ClaimRequest {
    ClaimRequest::new(batch, LEASE).handler(worker(), 5)
}

/// A message of topic `order.created` with `{"n": n}`.
pub fn order(n: usize) -> NewMessage {
    NewMessage::new("order.created", serde_json::json!({ "n": n }))
}

/// A successful completion with its attempt.
pub fn success(now: Timestamp) -> Completion {
    Completion {
        verdict: Verdict::Succeeded,
        attempt: Some(AttemptRecord {
            detail: None,
            started_at: now,
            finished_at: now,
            outcome: AttemptOutcome::Succeeded,
            status_code: None,
            excerpt: None,
        }),
    }
}

/// The attempt in full that [`detailed`] records: hostile header values, a binary body.
pub fn sample_detail() -> AttemptDetail {
    let mut d = AttemptDetail {
        request_headers: vec![("webhook-id".into(), "msg_1".into())],
        response_headers: vec![("x-hostile".into(), "<script>\"é\"</script>".into())],
        timing: AttemptTiming {
            connect: Some(Duration::from_micros(250)),
            first_byte: None,
            total: Duration::from_micros(1_000),
        },
        remote_addr: Some("127.0.0.1:9".into()),
        ..AttemptDetail::default()
    };
    d.set_response_body(b"\xff\x00ok", 16);
    d
}

/// [`success`] whose attempt carries [`sample_detail`].
pub fn detailed(now: Timestamp) -> Completion {
    let mut c = success(now);
    if let Some(a) = c.attempt.as_mut() {
        a.detail = Some(Box::new(sample_detail()));
    }
    c
}

/// `SELECT count(*)` over a query of this test's schema (`{s}` is the quoted schema).
pub async fn count(db: &TestDb, query: &str) -> i64 {
    let q = query.replace("{s}", &format!("\"{}\"", db.schema));
    outboxkit_postgres::sqlx::query_scalar(sqlx::AssertSqlSafe(q.to_string()))
        .fetch_one(&db.admin)
        .await
        .expect("a count query")
}
