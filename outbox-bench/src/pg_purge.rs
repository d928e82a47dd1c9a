//! Retention at scale on PostgreSQL: a dispatcher drains a backlog while `purge_tenant`
//! removes a million finished deliveries (with their attempts and messages) in batches of
//! 10,000, beside the same drain with the finished rows left alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use outboxkit_core::{Ledger, Stopwatch, TenantId, Timestamp};

use crate::common::{burn_down, err, secs, BenchResult, BurnDown, Progress, CONSUMER, TOPIC};
use crate::pg::{analyze, loader_pool, pool, store, with_schemas};
use crate::pg_dispatch::{burn_config, noop_dispatcher};
use crate::physical::{snapshot, Scope};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::Ctx;

/// When the first finished row was created: 1 s after the epoch. The `n` rows were created
/// one a millisecond from there (as a steady producer writes them; one instant for all of
/// them would make every probe of a message's deliveries read the whole history) and each
/// completed 5 ms after its creation, so [`cutoff_ms`] purges them all and none of the rows
/// the drain finishes.
const OLD_MS: i64 = 1000;

/// The purge cutoff for `n` finished rows: a second after the last of them completed.
fn cutoff_ms(n: usize) -> i64 {
    OLD_MS + i64::try_from(n).unwrap_or(i64::MAX / 2) + 1005
}
/// Deliveries per purge call.
const PURGE_LIMIT: u32 = 10_000;

/// Write `n` finished (succeeded) deliveries with one attempt each and their messages, in
/// tenant `default`, created from [`OLD_MS`] on, by `INSERT … SELECT` into the history table
/// (schema version 7: the attempt folded into the history row, as a completion writes it;
/// not timed).
async fn load_finished(ctx: &Ctx, schema: &str, n: usize) -> BenchResult<()> {
    let pool = loader_pool(&ctx.pg_url).await?;
    let s = format!("\"{schema}\"");
    let sql = format!(
        "INSERT INTO {s}.messages (id, tenant, topic, payload, available_at, created_at) \
         SELECT gen_random_uuid(), 'default', '{TOPIC}', '\\x7b7d'::bytea, {OLD_MS} + g, \
                {OLD_MS} + g \
           FROM generate_series(1, {n}) g; \
         INSERT INTO {s}.groups (tenant, kind, target) VALUES ('default', 'handler', '{CONSUMER}') \
           ON CONFLICT DO NOTHING; \
         INSERT INTO {s}.history (id, seq, message_id, group_id, tenant, created_at, \
                completed_at, status, attempts, snoozes, ledger_len, run, last_outcome, \
                last_at, a_probe, a_started) \
         SELECT gen_random_uuid(), nextval('{s}.queue_seq'), m.id, g.id, m.tenant, \
                m.created_at, m.created_at + 5, 4, 1, 0, 1, 1, 'succeeded', m.created_at + 5, \
                false, m.created_at \
           FROM {s}.messages m \
           JOIN {s}.groups g ON g.tenant = 'default' AND g.kind = 'handler' \
                            AND g.target = '{CONSUMER}' \
          WHERE m.created_at < {cutoff};",
        cutoff = cutoff_ms(n)
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&pool)
        .await
        .map_err(|e| format!("load finished rows: {e}"))?;
    analyze(&pool, schema, &["messages", "history", "groups"]).await?;
    pool.close().await;
    Ok(())
}

/// What one drain measured: its burn-down, the deliveries purged meanwhile with the seconds
/// the purge ran, and the cluster's WAL (`pg_stat_wal`: records, bytes) from the drain's
/// start to the purge's end.
struct Drain {
    burn: BurnDown,
    purged: u64,
    purge_secs: f64,
    wal: (i64, i64),
}

/// One drain of `pending` deliveries beside `finished` old ones, purging them meanwhile when
/// `purge`.
async fn drain(ctx: &Ctx, finished: usize, pending: usize, purge: bool) -> BenchResult<Drain> {
    with_schemas(ctx, "purge", |ours, _| async move {
        let pool = pool(&ctx.pg_url, 6).await?;
        let store = store(pool.clone(), &ours).await?;
        load_finished(ctx, &ours, finished).await?;
        crate::pg::load(ctx, &ours, pending).await?;
        let progress = Progress::new(pending as u64);
        let d = noop_dispatcher(Arc::new(store.clone()), &progress, burn_config())?;
        let scope = Scope::schema(&ours);
        let before = snapshot(&ctx.pg_url, &scope).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let purged = Arc::new(AtomicU64::new(0));
        let purger = purge.then(|| {
            let (store, stop, purged) = (store.clone(), stop.clone(), purged.clone());
            tokio::spawn(async move {
                let tenant = TenantId::new("default").map_err(err("tenant"))?;
                let cutoff =
                    Timestamp::from_unix_millis(cutoff_ms(finished)).map_err(err("cutoff"))?;
                let sw = Stopwatch::start();
                while !stop.load(Ordering::Relaxed) {
                    let r = store
                        .purge_tenant(&tenant, cutoff, PURGE_LIMIT)
                        .await
                        .map_err(err("purge"))?;
                    purged.fetch_add(r.deliveries, Ordering::Relaxed);
                    if r.deliveries == 0 && r.messages == 0 {
                        break;
                    }
                }
                Ok::<f64, String>(secs(&sw))
            })
        });
        let burn = burn_down(&d, &progress, pending as u64, None).await?;
        stop.store(true, Ordering::Relaxed);
        let purge_secs = match purger {
            Some(t) => t.await.map_err(|e| format!("purge task: {e}"))??,
            None => 0.0,
        };
        pool.close().await;
        let after = snapshot(&ctx.pg_url, &scope).await?;
        Ok(Drain {
            burn,
            purged: purged.load(Ordering::Relaxed),
            purge_secs,
            wal: (
                after.wal_records - before.wal_records,
                after.wal_bytes - before.wal_bytes,
            ),
        })
    })
    .await
}

/// The drain's rate while the purge runs ÷ without it.
pub async fn purge_under_load(ctx: &Ctx) -> Row {
    let finished = ctx.scale.n(1_000_000);
    let pending = ctx.scale.n(100_000);
    let scenario = "postgres dispatch burn-down during a purge of finished deliveries";
    let target = Target::None;
    let r = async {
        let quiet = drain(ctx, finished, pending, false).await?;
        let busy = drain(ctx, finished, pending, true).await?;
        Ok::<_, String>((quiet, busy))
    }
    .await;
    match r {
        Ok((quiet, busy)) => Row::measured(
            "pg-purge",
            scenario,
            format!(
                "{} pending, {} finished",
                crate::common::count_label(pending),
                crate::common::count_label(finished)
            ),
            Figure::rate(busy.burn.rate),
            Some(Figure::rate(quiet.burn.rate)),
            target,
            format!(
                "ours = the drain while purge_tenant (limit {PURGE_LIMIT}) runs in a loop, \
                 baseline = the same drain without the purge (same finished rows present); \
                 purged {} deliveries during the {:.1} s drain, {:.0}/s over the {:.1} s the \
                 purge ran; cluster WAL {}; {}",
                busy.purged,
                busy.burn.secs,
                per_second(busy.purged, busy.purge_secs),
                busy.purge_secs,
                wal_note(quiet.wal, pending as u64, "per delivered message alone"),
                wal_note(
                    (busy.wal.0 - quiet.wal.0, busy.wal.1 - quiet.wal.1),
                    busy.purged,
                    "more per purged delivery (with its message) beside the purge"
                ),
            ),
        ),
        Err(e) => Row::not_run("pg-purge", scenario, target, Status::Error(e)),
    }
}

/// `(records, bytes)` of WAL per `n`, described as `what`.
fn wal_note((records, bytes): (i64, i64), n: u64, what: &str) -> String {
    if n == 0 {
        return format!("{records} records, {bytes} B, nothing to divide by ({what})");
    }
    let n = n as f64;
    format!(
        "{:.2} records, {:.0} B {what}",
        records as f64 / n,
        bytes as f64 / n
    )
}
