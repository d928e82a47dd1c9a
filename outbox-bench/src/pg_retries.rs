//! PostgreSQL dispatch with retries: a backlog where 30 % of the deliveries fail twice before
//! they succeed (so every attempt is written to the ledger and the backoff path is taken),
//! beside the raw `SKIP LOCKED` claim + `unnest` completion loop with the same failures.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::retry::RetryPolicy;
use outboxkit_core::{Clock, Message, Stopwatch, SystemClock};
use outboxkit_dispatch::{Context, Dispatcher, HandlerOptions, HandlerResult};
use sqlx::Row as _;
use uuid::Uuid;

use crate::common::{burn_down, chunks, err, secs, BenchResult, Progress, CONSUMER};
use crate::pg::{analyze, create_raw, pool, raw_bulk, store, with_schemas};
use crate::pg_dispatch::{burn_config, BATCH, CONCURRENCY};
use crate::report::{per_second, Figure, Row, Status, Target};
use crate::timed::Timed;
use crate::Ctx;

/// Ids and claim tokens of raw jobs, as parallel arrays for `unnest`.
type Leases = (Vec<Uuid>, Vec<Uuid>);

/// A rate and what the run saw.
type Rate = (f64, String);

/// The attempts a failing delivery fails before it succeeds.
const FAILURES: u32 = 2;

/// Whether the message of payload `order_id` fails (30 % of them: `order_id % 10 < 3`).
fn fails(order_id: u64) -> bool {
    order_id % 10 < 3
}

/// The `order_id` of a benchmark payload.
fn order_id(payload: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(payload)
        .ok()?
        .get("order_id")?
        .as_u64()
}

/// The handler: fails the first two attempts of a failing message, succeeds otherwise.
async fn flaky(ctx: Context, m: Message) -> HandlerResult {
    match order_id(&m.payload) {
        Some(id) if fails(id) && ctx.attempt() <= FAILURES => HandlerResult::retry("flaky"),
        Some(_) => HandlerResult::Ok,
        None => HandlerResult::Discard("not a benchmark payload".into()),
    }
}

/// A retry schedule of 1 ms steps: the backoff path without waiting.
fn policy() -> BenchResult<RetryPolicy> {
    RetryPolicy::schedule(vec![Duration::from_millis(1); 4]).map_err(err("retry policy"))
}

/// One burn-down of ours: messages delivered per second, and where the time went.
async fn ours_once(ctx: &Ctx, n: usize) -> BenchResult<(f64, String)> {
    with_schemas(ctx, "retry", |ours, _| async move {
        let pool = pool(&ctx.pg_url, 4).await?;
        let store = store(pool.clone(), &ours).await?;
        crate::pg::load(ctx, &ours, n).await?;
        let timed = Arc::new(Timed::new(Arc::new(store.clone())));
        let progress = Progress::allowing_retries(n as u64);
        let d = Dispatcher::builder(timed.clone())
            .handler_with(
                CONSUMER,
                "*",
                flaky,
                HandlerOptions {
                    retry: policy()?,
                    concurrency: Some(CONCURRENCY),
                    ..HandlerOptions::default()
                },
            )
            .config(burn_config())
            .observer(progress.clone())
            .build()
            .map_err(err("dispatcher"))?;
        let b = burn_down(&d, &progress, n as u64, None).await?;
        // The ledger of layout v3: the attempts table, plus the final attempt folded into
        // each history row (`a_started` set) instead of a row of its own.
        let attempts: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT (SELECT count(*) FROM \"{ours}\".attempts) + \
                    (SELECT count(*) FROM \"{ours}\".history WHERE a_started IS NOT NULL)"
        )))
        .fetch_one(&pool)
        .await
        .map_err(|e| format!("count attempts: {e}"))?;
        let want = n as i64 + 2 * (0..n as u64).filter(|i| fails(*i)).count() as i64;
        if attempts != want {
            return Err(format!("the ledger holds {attempts} attempts, not {want}"));
        }
        pool.close().await;
        Ok((
            b.rate,
            format!(
                "{}; {} retries, {attempts} attempts in the ledger",
                timed.spent.breakdown(b.secs),
                progress.retried()
            ),
        ))
    })
    .await
}

/// The raw loop: claim 100 (`SKIP LOCKED`), then in one statement each, the batch's
/// successes and its failures (back to pending, due 1 ms later).
async fn raw_once(ctx: &Ctx, n: usize) -> BenchResult<(f64, String)> {
    with_schemas(ctx, "retry", |_, raw| async move {
        let pool = pool(&ctx.pg_url, 4).await?;
        create_raw(&pool, &raw).await?;
        for c in chunks(n, 1000) {
            raw_bulk(&pool, &raw, c).await?;
        }
        analyze(&pool, &raw, &["messages", "jobs"]).await?;
        let s = format!("\"{raw}\"");
        let claim = format!(
            "WITH picked AS ( \
               SELECT id FROM {s}.jobs \
                WHERE status IN ('pending', 'processing') AND next_attempt_at <= $1::int8 \
                ORDER BY next_attempt_at, seq LIMIT $2::int8 FOR UPDATE SKIP LOCKED), \
             claimed AS ( \
               UPDATE {s}.jobs j SET status = 'processing', attempts = j.attempts + 1, \
                      claim_token = gen_random_uuid(), lease_until = $3::int8, \
                      next_attempt_at = $3::int8, updated_at = $1::int8 \
                 FROM picked WHERE j.id = picked.id \
               RETURNING j.id, j.claim_token, j.message_id, j.attempts) \
             SELECT c.id, c.claim_token, c.attempts, m.payload FROM claimed c \
               JOIN {s}.messages m ON m.id = c.message_id"
        );
        let succeed = format!(
            "UPDATE {s}.jobs j SET status = 'succeeded', completed_at = $1::int8, \
                    claim_token = NULL, lease_until = NULL, updated_at = $1::int8 \
               FROM unnest($2::uuid[], $3::uuid[]) AS u(id, token) \
              WHERE j.id = u.id AND j.claim_token = u.token AND j.status = 'processing'"
        );
        let retry = format!(
            "UPDATE {s}.jobs j SET status = 'pending', next_attempt_at = $1::int8 + 1, \
                    claim_token = NULL, lease_until = NULL, updated_at = $1::int8 \
               FROM unnest($2::uuid[], $3::uuid[]) AS u(id, token) \
              WHERE j.id = u.id AND j.claim_token = u.token AND j.status = 'processing'"
        );
        let mut conn = pool.acquire().await.map_err(|e| format!("acquire: {e}"))?;
        let (mut done, mut retried) = (0u64, 0u64);
        let sw = Stopwatch::start();
        loop {
            let now = SystemClock.now().as_unix_millis();
            let rows = sqlx::query(sqlx::AssertSqlSafe(claim.to_string()))
                .bind(now)
                .bind(i64::from(BATCH))
                .bind(now + 40_000)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| format!("raw claim: {e}"))?;
            if rows.is_empty() {
                // Failed jobs may be due within the next millisecond.
                if done == n as u64 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            let (mut ok, mut again) = (Leases::default(), Leases::default());
            for r in &rows {
                let attempts: i32 = r.get(2);
                let id = order_id(r.get::<&[u8], _>(3)).ok_or("a raw payload without order_id")?;
                let side = if fails(id) && attempts as u32 <= FAILURES {
                    &mut again
                } else {
                    &mut ok
                };
                side.0.push(r.get(0));
                side.1.push(r.get(1));
            }
            let now = SystemClock.now().as_unix_millis();
            for (sql, (ids, tokens), count) in
                [(&succeed, ok, &mut done), (&retry, again, &mut retried)]
            {
                if ids.is_empty() {
                    continue;
                }
                *count += sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
                    .bind(now)
                    .bind(ids)
                    .bind(tokens)
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| format!("raw completion: {e}"))?
                    .rows_affected();
            }
        }
        let raw_secs = secs(&sw);
        drop(conn);
        pool.close().await;
        Ok((per_second(done, raw_secs), format!("{retried} retries")))
    })
    .await
}

/// The retries scenario: ours and raw alternate `reps` times on fresh schemas, best of each.
pub async fn retries(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(100_000);
    let scenario = "postgres dispatch with retries (30 % fail twice)";
    let target = Target::MinRatio(0.8);
    let reps = ctx.reps();
    let r = async {
        let (mut best, mut best_raw) = (None::<Rate>, None::<Rate>);
        for _ in 0..reps {
            let o = ours_once(ctx, n).await?;
            if best.as_ref().is_none_or(|b| o.0 > b.0) {
                best = Some(o);
            }
            let r = raw_once(ctx, n).await?;
            if best_raw.as_ref().is_none_or(|b| r.0 > b.0) {
                best_raw = Some(r);
            }
        }
        best.zip(best_raw)
            .ok_or_else(|| "no repetition ran".to_owned())
    }
    .await;
    match r {
        Ok(((rate, why), (raw, raw_why))) => Row::measured(
            "pg-retries",
            scenario,
            ctx.scale.label(n),
            Figure::rate(rate),
            Some(Figure::rate(raw)),
            target,
            format!(
                "messages delivered per second; retry steps of 1 ms; batch {BATCH}, \
                 concurrency {CONCURRENCY}; ours: {why}; raw (claim 100 SKIP LOCKED, then one \
                 unnest UPDATE for the successes and one for the failures, no ledger, one \
                 connection): {raw_why}; best of {reps}"
            ),
        ),
        Err(e) => Row::not_run("pg-retries", scenario, target, Status::Error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_percent_fail() {
        assert_eq!((0..1000).filter(|i| fails(*i)).count(), 300);
        assert_eq!(order_id(&crate::common::payload(42)), Some(42));
    }
}
