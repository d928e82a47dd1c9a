//! A database at an older schema version with deliveries in every status, for the upgrade
//! tests. The rows are written by the store's own statements into a scratch schema at the
//! latest version, then copied row for row into the test's schema, created at the older
//! version, through the view `delivery_rows` (version 6's columns; earlier versions have a
//! subset): exactly the rows the older code left, in the tables that version had.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    AttemptOutcome, AttemptRecord, ClaimRequest, Clock, Completion, DeliveryStore, EndpointId,
    EndpointStatus, EndpointStore, EndpointUpdate, Lease, MessageStore, NewMessage, OsEntropy,
    TenantId, TopicFilter, Verdict,
};
use outboxkit_core::{DeliveryStoreExt, OperatorStore};
use outboxkit_postgres::{migrations, sqlx, PostgresConfig, PostgresStore};
use outboxkit_testing::ManualClock;

use crate::support::{success, worker, TestDb, LEASE};

/// Every attempt of the version-7 schema `s` (quoted) as rows of `attempts`: the table's, and
/// the final attempts folded into history rows.
fn every_attempt(s: &str) -> String {
    format!(
        "(SELECT delivery_id, number, tenant, probe, started_at, finished_at, outcome, \
                 status_code, excerpt, run, scheduled_at FROM {s}.attempts \
          UNION ALL \
          SELECT id, ledger_len, tenant, a_probe, a_started, last_at, last_outcome, \
                 last_status_code, last_excerpt, run, a_scheduled \
            FROM {s}.history WHERE a_started IS NOT NULL)"
    )
}

/// Every row of the outbox's tables, as JSON text in a stable order. A delivery is listed
/// once whichever table holds it (the hot table, from version 6 the history, from version 7
/// the view of both with version 6's columns), an attempt once wherever it is (from version
/// 7 a final attempt may be folded into its history row).
pub async fn snapshot(admin: &sqlx::PgPool, s: &str) -> Vec<String> {
    let layout = |table: &str| {
        let q = format!("SELECT to_regclass('{s}.{table}')::text");
        async move {
            let found: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(q.to_string()))
                .fetch_one(admin)
                .await
                .unwrap();
            found.is_some()
        }
    };
    let (attempts, deliveries) = if layout("delivery_rows").await {
        (every_attempt(s), format!("{s}.delivery_rows"))
    } else if layout("deliveries_done").await {
        (
            format!("{s}.attempts"),
            format!("(SELECT * FROM {s}.deliveries UNION ALL SELECT * FROM {s}.deliveries_done)"),
        )
    } else {
        (format!("{s}.attempts"), format!("{s}.deliveries"))
    };
    let mut out = Vec::new();
    for (table, name, key) in [
        (format!("{s}.messages"), "messages", "id"),
        (deliveries, "deliveries", "id"),
        (attempts, "attempts", "delivery_id, number"),
        (format!("{s}.endpoints"), "endpoints", "id"),
        // The columns every version has (version 10 adds `status`, 'active' for every
        // existing consumer: checked in `upgrade_pause`).
        (
            format!("(SELECT name, filter, created_at FROM {s}.consumers)"),
            "consumers",
            "name",
        ),
    ] {
        // Every column; of the endpoints, all but those added since with their defaults: the
        // custom headers (`[]` on every endpoint written before them, checked by the upgrade
        // tests) and `fifo` (off): no row's data changes.
        let row = if name == "endpoints" {
            "(to_jsonb(t) - 'headers' - 'fifo')::text"
        } else {
            "row_to_json(t)::text"
        };
        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {row} FROM {table} t ORDER BY {key}"
        )))
        .fetch_all(admin)
        .await
        .unwrap();
        out.push(format!("{name}: {}", rows.len()));
        out.extend(rows);
    }
    out
}

fn dead() -> Completion {
    Completion {
        verdict: Verdict::Dead {
            reason: outboxkit_core::DeadReason::Permanent,
        },
        attempt: None,
    }
}

/// What [`every_status_at`] left, for the checks after the upgrade.
pub struct Legacy {
    pub tenant: TenantId,
    pub hook: EndpointId,
    /// The handler deliveries leased at the end (`processing`), still live.
    pub processing: Vec<Lease>,
    /// The handler delivery marked `sending`, leased.
    pub sending: Lease,
}

/// The test's schema at `version` (migrations up to it, recorded as its migrate() did),
/// holding: 6 handler and 6 webhook deliveries of keys k0 (n = 0, 2, 4) and k1 (1, 3, 5),
/// and one unkeyed message's two. Handler: 2 succeeded, 1 dead, 1 sending, 2 processing
/// (leased), 1 pending behind its key's leased head; webhook: one failed attempt back to
/// pending with a due time, then the endpoint paused (its 7 deliveries held).
pub async fn every_status_at(db: &Arc<TestDb>, version: i32, clock: &Arc<ManualClock>) -> Legacy {
    let s = format!("\"{}\"", db.schema);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA {s}; CREATE TABLE {s}.schema_migrations (version integer \
         PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL)"
    )))
    .execute(&db.admin)
    .await
    .unwrap();
    for m in migrations().iter().filter(|m| m.version <= version) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(
            (m.sql(&db.schema).unwrap()).to_string(),
        ))
        .execute(&db.admin)
        .await
        .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {s}.schema_migrations VALUES ($1, $2, 0)"
        )))
        .bind(m.version)
        .bind(m.name)
        .execute(&db.admin)
        .await
        .unwrap();
    }

    // The scratch schema the store writes in.
    let scratch = format!("{}_src", db.schema);
    let store = PostgresStore::new(
        db.pool(&db.app("legacy"), 2).await,
        PostgresConfig::new(scratch.clone()),
        clock.clone(),
        Arc::new(OsEntropy),
    )
    .unwrap();
    store.migrate().await.unwrap();
    let acme = TenantId::new("acme").unwrap();
    outboxkit_core::EndpointStore::put_consumer(
        &store,
        &outboxkit_core::Consumer {
            name: worker(),
            filter: TopicFilter::all(),
            created_at: clock.now(),
            status: outboxkit_core::ConsumerStatus::Active,
        },
    )
    .await
    .unwrap();
    let hook = outboxkit_testing::sample_endpoint(&acme, clock.now());
    store.create_endpoint(&hook).await.unwrap();
    for n in 0..6 {
        let m = NewMessage::new("order.created", serde_json::json!({ "n": n }))
            .tenant("acme")
            .ordering_key(format!("k{}", n % 2));
        store.enqueue(m).await.unwrap();
        clock.advance(Duration::from_millis(1));
    }
    let handler = ClaimRequest::new(5, LEASE).handler(worker(), 5);
    let claimed = store.claim(&handler).await.unwrap();
    assert_eq!(claimed.len(), 2, "one per ordering key is claimable");
    for c in &claimed {
        store
            .complete(&c.lease, &success(clock.now()))
            .await
            .unwrap();
    }
    let claimed = store.claim(&handler).await.unwrap();
    store.complete(&claimed[0].lease, &dead()).await.unwrap();
    store.mark_sending(&claimed[1].lease).await.unwrap();
    let sending = claimed[1].lease.clone();
    let unkeyed = store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})).tenant("acme"))
        .await
        .unwrap();
    assert_eq!(unkeyed.deliveries, 2);
    let hooks = ClaimRequest::new(1, LEASE).webhooks(5);
    let failed = store.claim(&hooks).await.unwrap();
    let now = clock.now();
    store
        .complete(
            &failed[0].lease,
            &Completion {
                verdict: Verdict::Retry {
                    at: now.saturating_add(Duration::from_secs(60)),
                },
                attempt: Some(AttemptRecord {
                    detail: None,
                    started_at: now,
                    finished_at: now,
                    outcome: AttemptOutcome::Failed(outboxkit_core::ErrorClass::Timeout),
                    status_code: Some(503),
                    excerpt: Some("busy".into()),
                }),
            },
        )
        .await
        .unwrap();
    store
        .update_endpoint(
            &acme,
            hook.id,
            &EndpointUpdate {
                status: Some(EndpointStatus::Paused),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let handler_claim = store.claim(&handler).await.unwrap();
    assert_eq!(
        handler_claim.len(),
        2,
        "k0's third (its head is dead) and the unkeyed one"
    );
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (
            stats.succeeded,
            stats.dead,
            stats.sending,
            stats.processing,
            stats.held,
            stats.pending
        ),
        (2, 1, 1, 2, 7, 1),
        "every status is present before the upgrade: {stats:?}"
    );

    // Row for row into the older tables (a delivery from either of the scratch tables),
    // and the enqueue-order sequence past the copied rows, as the older code left it.
    copy_rows(&db.admin, &scratch, &db.schema).await;
    let rows = if version >= 6 {
        format!("(SELECT id FROM {s}.deliveries UNION ALL SELECT id FROM {s}.deliveries_done)")
    } else {
        format!("{s}.deliveries")
    };
    let copied: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {rows} t"
    )))
    .fetch_one(&db.admin)
    .await
    .unwrap();
    assert_eq!(copied, 14, "every delivery is in the older schema");
    Legacy {
        tenant: acme,
        hook: hook.id,
        processing: handler_claim.into_iter().map(|c| c.lease).collect(),
        sending,
    }
}

/// Every row of the scratch schema `src` (at the latest version) into the schema `dst` at an
/// older version, as the older code wrote them: a delivery from the view `delivery_rows`
/// (version 6's columns), an attempt from `attempts` or folded into a history row, each
/// table's columns the older table has; the enqueue-order sequence past the copied rows.
/// Drops `src`.
pub async fn copy_rows(admin: &sqlx::PgPool, src: &str, dst: &str) {
    let (src, s) = (format!("\"{src}\""), format!("\"{dst}\""));
    let folded = every_attempt(&src);
    let history: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT to_regclass('{s}.deliveries_done')::text"
    )))
    .fetch_one(admin)
    .await
    .unwrap();
    // Version 6 keeps finished deliveries in `deliveries_done`, earlier ones in `deliveries`.
    let (open, done) = match history {
        Some(_) => (
            format!(
                "(SELECT * FROM {src}.delivery_rows \
                   WHERE status IN ('pending', 'held', 'processing', 'sending'))"
            ),
            format!("(SELECT * FROM {src}.delivery_rows WHERE status IN ('succeeded', 'dead'))"),
        ),
        None => (
            format!("{src}.delivery_rows"),
            format!("(SELECT * FROM {src}.delivery_rows WHERE false)"),
        ),
    };
    for (table, from) in [
        ("messages", format!("{src}.messages")),
        ("endpoints", format!("{src}.endpoints")),
        ("consumers", format!("{src}.consumers")),
        ("deliveries", open),
        ("deliveries_done", done),
        ("attempts", folded),
    ] {
        let cols: Option<String> = sqlx::query_scalar(
            "SELECT string_agg(column_name, ', ' ORDER BY ordinal_position) \
               FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
        )
        .bind(dst)
        .bind(table)
        .fetch_one(admin)
        .await
        .unwrap();
        let Some(cols) = cols else { continue };
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {s}.{table} ({cols}) SELECT {cols} FROM {from} t"
        )))
        .execute(admin)
        .await
        .unwrap();
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SELECT setval(pg_get_serial_sequence('{s}.deliveries', 'seq'), \
                       (SELECT max(seq) FROM (SELECT seq FROM {s}.deliveries UNION ALL \
                          SELECT seq FROM {src}.delivery_rows) x)); \
         DROP SCHEMA {src} CASCADE;"
    )))
    .execute(admin)
    .await
    .unwrap();
}

/// Four processes (each a store on its own one-connection pool) call `migrate()` on a
/// database at `from` at once: exactly one call applies, and it applies every migration
/// after `from` (at least one). Returns the stores.
pub async fn migrate_concurrently(
    db: &Arc<TestDb>,
    clock: &Arc<ManualClock>,
    from: i32,
) -> Vec<PostgresStore> {
    let stores: Vec<_> = futures::future::join_all((0..4).map(|i| {
        let db = db.clone();
        let clock = clock.clone();
        async move {
            let pool = db.pool(&db.app(&format!("m{i}")), 1).await;
            db.store(pool, clock)
        }
    }))
    .await;
    let applied: Vec<u32> = futures::future::join_all(stores.iter().map(|st| st.migrate()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let newer = migrations().iter().filter(|m| m.version > from).count() as u32;
    assert!(newer >= 1, "a migration after version {from} is shipped");
    assert_eq!(
        applied.iter().filter(|n| **n > 0).count(),
        1,
        "exactly one call applies: {applied:?}"
    );
    assert_eq!(
        applied.iter().sum::<u32>(),
        newer,
        "it applies every migration after version {from}: {applied:?}"
    );
    stores
}
