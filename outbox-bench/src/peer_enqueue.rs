//! pgmq as a peer, the enqueue rows: single enqueue at 8 writers in its own and in the
//! caller's transaction (`store.enqueue` / `enqueue_in` vs `pgmq.send`), and bulk
//! (`enqueue_batch` vs `pgmq.send_batch`), interleaved, the median of the reps.

use outboxkit_core::{MessageStore, Stopwatch};

use crate::common::{chunks, concurrently, err, message, secs, BenchResult};
use crate::peer::{json, send_batch, with_queue};
use crate::pg::{pool, store, with_schemas};
use crate::report::{median, per_second, Figure, Row, Status, Target};
use crate::Ctx;

/// How a writer of the enqueue rows enqueues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enqueue {
    /// One message per transaction of its own: `store.enqueue` vs `pgmq.send`.
    Own,
    /// In the caller's transaction: BEGIN, `enqueue_in` / `pgmq.send`, COMMIT.
    InTx,
}

/// Single enqueue at 8 writers, ours vs `pgmq.send`, both modes.
pub async fn enqueue(ctx: &Ctx) -> Vec<Row> {
    let mut rows = Vec::new();
    for mode in [Enqueue::Own, Enqueue::InTx] {
        let (key, scenario, target) = match mode {
            Enqueue::Own => (
                "pgmq-enqueue",
                "postgres store.enqueue vs pgmq.send, 8 writers, 1 msg/tx",
                Target::MinRatio(1.0),
            ),
            Enqueue::InTx => (
                "pgmq-enqueue-in",
                "postgres enqueue_in vs pgmq.send inside BEGIN/COMMIT, 8 writers",
                Target::MinRatio(0.9),
            ),
        };
        let n = ctx.scale.n(20_000);
        rows.push(match enqueue_once(ctx, n, mode).await {
            Ok((o, p)) => Row::measured(
                key,
                scenario,
                ctx.scale.label(n),
                Figure::rate(median(&o).unwrap_or(0.0)),
                Some(Figure::rate(median(&p).unwrap_or(0.0))),
                target,
                format!(
                    "{}; same payload, 8 connections each; ratio ours ÷ pgmq, median of {} \
                     interleaved (ours {}; pgmq {} msg/s)",
                    match mode {
                        Enqueue::Own =>
                            "ours: store.enqueue (message + delivery, NOTIFY after commit); \
                             pgmq: SELECT pgmq.send(queue, msg) autocommit",
                        Enqueue::InTx =>
                            "ours: BEGIN + enqueue_in (NOTIFY in the transaction, the default) + \
                             COMMIT; pgmq: BEGIN + pgmq.send + COMMIT",
                    },
                    o.len(),
                    join_rates(&o),
                    join_rates(&p)
                ),
            ),
            Err(e) => Row::not_run(key, scenario, target, Status::Error(e)),
        });
    }
    rows
}

fn join_rates(v: &[f64]) -> String {
    v.iter()
        .map(|r| format!("{r:.0}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The reps of one enqueue row: (ours, pgmq) rates.
async fn enqueue_once(ctx: &Ctx, n: usize, mode: Enqueue) -> BenchResult<(Vec<f64>, Vec<f64>)> {
    with_queue(ctx, |queue| async move {
        with_schemas(ctx, "peerenq", |ours, _| async move {
            let p = pool(&ctx.pg_url, 8).await?;
            let st = store(p.clone(), &ours).await?;
            let (mut o, mut q) = (Vec::new(), Vec::new());
            for _ in 0..ctx.reps() {
                let (p2, st2) = (p.clone(), st.clone());
                let t = concurrently(n, 8, move |i| {
                    let (p, st) = (p2.clone(), st2.clone());
                    async move {
                        match mode {
                            Enqueue::Own => {
                                st.enqueue(message(i)).await.map_err(err("enqueue"))?;
                            }
                            Enqueue::InTx => {
                                let mut tx = p.begin().await.map_err(|e| format!("begin: {e}"))?;
                                st.enqueue_in(&mut tx, message(i))
                                    .await
                                    .map_err(err("enqueue"))?;
                                tx.commit().await.map_err(|e| format!("commit: {e}"))?;
                            }
                        }
                        Ok(())
                    }
                })
                .await?;
                o.push(per_second(n as u64, t));
                let (p2, q2) = (p.clone(), queue.clone());
                let t = concurrently(n, 8, move |i| {
                    let (p, queue) = (p2.clone(), q2.clone());
                    async move {
                        let send = sqlx::query("SELECT pgmq.send($1, $2::jsonb)")
                            .bind(queue)
                            .bind(json(i));
                        match mode {
                            Enqueue::Own => {
                                send.execute(&p)
                                    .await
                                    .map_err(|e| format!("pgmq.send: {e}"))?;
                            }
                            Enqueue::InTx => {
                                let mut tx = p.begin().await.map_err(|e| format!("begin: {e}"))?;
                                send.execute(&mut *tx)
                                    .await
                                    .map_err(|e| format!("pgmq.send: {e}"))?;
                                tx.commit().await.map_err(|e| format!("commit: {e}"))?;
                            }
                        }
                        Ok(())
                    }
                })
                .await?;
                q.push(per_second(n as u64, t));
            }
            p.close().await;
            Ok((o, q))
        })
        .await
    })
    .await
}

/// Bulk enqueue, 1,000 per call: `enqueue_batch` vs `pgmq.send_batch`.
pub async fn bulk(ctx: &Ctx) -> Row {
    let n = ctx.scale.n(100_000);
    let key = "pgmq-bulk";
    let scenario = "postgres enqueue_batch vs pgmq.send_batch, 1,000 per call";
    let target = Target::MinRatio(1.0);
    let r = with_queue(ctx, |queue| async move {
        with_schemas(ctx, "peerbulk", |ours, _| async move {
            let p = pool(&ctx.pg_url, 2).await?;
            let st = store(p.clone(), &ours).await?;
            let (mut o, mut q) = (Vec::new(), Vec::new());
            for _ in 0..ctx.reps() {
                let sw = Stopwatch::start();
                for c in chunks(n, 1000) {
                    st.enqueue_batch(c.map(message).collect())
                        .await
                        .map_err(err("enqueue"))?;
                }
                o.push(per_second(n as u64, secs(&sw)));
                let sw = Stopwatch::start();
                for c in chunks(n, 1000) {
                    send_batch(&p, &queue, c).await?;
                }
                q.push(per_second(n as u64, secs(&sw)));
            }
            p.close().await;
            Ok((o, q))
        })
        .await
    })
    .await;
    match r {
        Ok((o, q)) => Row::measured(
            key,
            scenario,
            ctx.scale.label(n),
            Figure::rate(median(&o).unwrap_or(0.0)),
            Some(Figure::rate(median(&q).unwrap_or(0.0))),
            target,
            format!(
                "one caller, calls in sequence, same payload; ratio ours ÷ pgmq, median of {} \
                 interleaved (ours {}; pgmq {} msg/s)",
                o.len(),
                join_rates(&o),
                join_rates(&q)
            ),
        ),
        Err(e) => Row::not_run(key, scenario, target, Status::Error(e)),
    }
}
