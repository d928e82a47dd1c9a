//! Redis server work per enqueue and per delivered message, ours beside the raw scripts of
//! `redis_bench.rs` (issue 35), counted on a private `redis-server` the bench starts on a
//! free loopback port (so no other client's commands land in its statistics):
//!
//! - **Usec per operation** (the row's figure): the usec of the script and function entries
//!   (`EVALSHA`, `FCALL`, …) in `INFO commandstats`, each holding everything it ran inside;
//!   both sides send nothing else while measured.
//! - **Per entry**, from one more run with `SLOWLOG` at `slowlog-log-slower-than 0`: calls
//!   and usec of each script or function (claim, complete, …) by name. Logging every command
//!   costs time inside the scripts (each command they run is logged too), so this run only
//!   splits the time and never counts it.
//! - **`INFO commandstats`**: the Redis commands per operation run inside the entries and
//!   the usec spent in them.
//! - **Server CPU** per operation (`used_cpu_user + used_cpu_sys` of `INFO cpu`), which also
//!   holds reading requests and writing replies.
//!
//! Enqueue: one message per call from 8 writers (ours `store.enqueue`, raw one script).
//! Delivery: a loaded backlog burnt down (ours the dispatcher with a no-op handler, claim of
//! 100 + completion; raw the pipelined claim + ack scripts). Each phase runs three times
//! (plus the slowlog run) under fresh prefixes and each side keeps its least time. The ratio
//! is raw ÷ ours.
//! Skipped when `redis-server` is not on the `PATH`.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Script;

use crate::common::Progress;
use crate::common::{burn_down, err, load, unique, BenchResult};
use crate::pg_dispatch::{burn_config, noop_dispatcher, BATCH};
use crate::redis_bench::{
    connection, ours_enqueues, raw_burn, raw_enqueues, raw_load, store, RAW_ENQUEUE,
};
use crate::report::{Figure, Row, Status, Target};
use crate::Ctx;

/// A `redis-server` of the bench's own on a free loopback port, stopped on drop.
pub(crate) struct PrivateRedis {
    child: Child,
    pub(crate) url: String,
}

impl PrivateRedis {
    /// Start one (no persistence) and wait until it answers.
    pub(crate) async fn start() -> BenchResult<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("free port: {e}"))?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?;
        let server = PrivateRedis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        for _ in 0..100 {
            if let Ok(mut c) = connection(&server.url).await {
                let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut c).await;
                if pong.is_ok() {
                    return Ok(server);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err("the private redis-server did not answer".into())
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Script and function entry commands: their time holds what they ran inside.
const ENTRIES: &[&str] = &[
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Commands of the bench's own bookkeeping, left out of the counts.
const OWN: &[&str] = &[
    "info", "slowlog", "config", "ping", "client", "hello", "select",
];

/// `INFO commandstats` and `INFO cpu` at one moment.
#[derive(Debug, Default)]
struct Snap {
    /// command → (calls, usec)
    cmds: BTreeMap<String, (u64, u64)>,
    cpu_secs: f64,
}

async fn snap(conn: &mut MultiplexedConnection) -> BenchResult<Snap> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .query_async(conn)
        .await
        .map_err(|e| format!("info: {e}"))?;
    let mut s = Snap::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_") {
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let field = |k: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(k)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            s.cmds
                .insert(name.to_owned(), (field("calls"), field("usec")));
        } else if let Some(v) = line
            .strip_prefix("used_cpu_user:")
            .or_else(|| line.strip_prefix("used_cpu_sys:"))
        {
            s.cpu_secs += v.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    Ok(s)
}

/// One side's server work over one phase, per operation.
#[derive(Debug, Default)]
struct Work {
    ops: u64,
    /// Top-level commands from `SLOWLOG`: label → (calls, usec).
    top: BTreeMap<String, (u64, u64)>,
    /// `INFO commandstats` differences: command → (calls, usec).
    stats: BTreeMap<String, (u64, u64)>,
    cpu_secs: f64,
}

impl Work {
    /// Usec per operation in the script and function entries.
    fn usec(&self) -> f64 {
        self.stats
            .iter()
            .filter(|(k, _)| ENTRIES.contains(&k.as_str()))
            .map(|(_, v)| v.1)
            .sum::<u64>() as f64
            / self.ops as f64
    }

    /// Usec per operation spent in the Redis commands themselves (all but the entries); the
    /// rest of an entry's time is Lua and the call's own overhead.
    fn inner_usec(&self) -> f64 {
        self.stats
            .iter()
            .filter(|(k, _)| !ENTRIES.contains(&k.as_str()))
            .map(|(_, v)| v.1)
            .sum::<u64>() as f64
            / self.ops as f64
    }

    /// A compact account: entries (calls and usec per call), top-level commands per op,
    /// the commands per op run inside, server CPU per op.
    fn describe(&self) -> String {
        let per = |n: u64| n as f64 / self.ops as f64;
        let top: Vec<String> = self
            .top
            .iter()
            .map(|(k, (c, u))| format!("{k} {:.3}/op × {:.1} µs", per(*c), *u as f64 / *c as f64))
            .collect();
        let entries: Vec<String> = self
            .stats
            .iter()
            .filter(|(k, _)| ENTRIES.contains(&k.as_str()))
            .map(|(k, (c, u))| format!("{k} {c} calls {:.1} µs/call", *u as f64 / *c as f64))
            .collect();
        let mut inner: Vec<(&String, u64)> = self
            .stats
            .iter()
            .filter(|(k, _)| !ENTRIES.contains(&k.as_str()))
            .map(|(k, v)| (k, v.0))
            .collect();
        inner.sort_by_key(|e| std::cmp::Reverse(e.1));
        let inner: Vec<String> = inner
            .iter()
            .map(|(k, c)| format!("{k} {:.2}", per(*c)))
            .collect();
        let all: f64 = self.stats.values().map(|v| v.0).sum::<u64>() as f64;
        format!(
            "{:.1} µs/op [slowlog run: {}]; commandstats: {}; commands/op {:.2} ({}), {:.1} µs/op in them; \
             cpu {:.1} µs/op",
            self.usec(),
            top.join(", "),
            entries.join(", "),
            all / self.ops as f64,
            inner.join(" "),
            self.inner_usec(),
            self.cpu_secs * 1e6 / self.ops as f64,
        )
    }
}

/// Run `phase` between two readings of the private server's counters; `phase` answers the
/// operations it did.
async fn measure<F, Fut>(conn: &mut MultiplexedConnection, log: bool, phase: F) -> BenchResult<Work>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = BenchResult<u64>>,
{
    for (k, v) in [
        ("slowlog-log-slower-than", if log { "0" } else { "-1" }),
        ("slowlog-max-len", "2000000"),
    ] {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(conn)
            .await
            .map_err(|e| format!("config set: {e}"))?;
    }
    let () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(conn)
        .await
        .map_err(|e| format!("slowlog reset: {e}"))?;
    let before = snap(conn).await?;
    let ops = phase().await?;
    let after = snap(conn).await?;
    // Tens of thousands of entries: more than the default response timeout allows.
    let mut long = conn.clone();
    long.set_response_timeout(Duration::from_secs(300));
    let entries: Vec<redis::Value> = if log {
        redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut long)
            .await
            .map_err(|e| format!("slowlog get: {e}"))?
    } else {
        Vec::new()
    };
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg("-1")
        .query_async(conn)
        .await
        .map_err(|e| format!("config set: {e}"))?;
    let mut work = Work {
        ops: ops.max(1),
        cpu_secs: after.cpu_secs - before.cpu_secs,
        ..Work::default()
    };
    for (k, (c, u)) in &after.cmds {
        let name = k.split('|').next().unwrap_or_default();
        if OWN.contains(&name) {
            continue;
        }
        let (c0, u0) = before.cmds.get(k).copied().unwrap_or((0, 0));
        if c > &c0 {
            work.stats.insert(k.clone(), (c - c0, u - u0));
        }
    }
    for entry in entries {
        let Ok((_, _, usec, args, client, _)) =
            redis::from_redis_value::<(i64, i64, u64, Vec<Vec<u8>>, String, String)>(entry)
        else {
            continue;
        };
        if client.starts_with('?') {
            continue; // ran inside a script or function
        }
        let word = |i: usize| {
            args.get(i)
                .map(|a| String::from_utf8_lossy(a).to_lowercase())
                .unwrap_or_default()
        };
        let cmd = word(0);
        if OWN.contains(&cmd.as_str()) {
            continue;
        }
        let label = match cmd.as_str() {
            "evalsha" | "evalsha_ro" => format!("{cmd} {}", &word(1)[..8.min(word(1).len())]),
            "fcall" | "fcall_ro" => format!("{cmd} {}", word(1)),
            _ => cmd,
        };
        let e = work.top.entry(label).or_default();
        e.0 += 1;
        e.1 += usec;
    }
    Ok(work)
}

/// Runs of each phase; each side keeps its least time (what other processes on the machine
/// added to the server's wall-clock time is least there).
const REPS: usize = 3;

/// The least-time `Work` of each side over `reps` runs of `phase` (`phase(false)`), each
/// with the per-entry split of one more run with the slowlog on (`phase(true)`).
async fn best_of<F, Fut>(reps: usize, phase: F) -> BenchResult<(Work, Work)>
where
    F: Fn(bool) -> Fut,
    Fut: std::future::Future<Output = BenchResult<(Work, Work)>>,
{
    let (logged_ours, logged_raw) = phase(true).await?;
    let mut best: Option<(Work, Work)> = None;
    for _ in 0..reps {
        let (mut o, mut r) = phase(false).await?;
        o.top.clone_from(&logged_ours.top);
        r.top.clone_from(&logged_raw.top);
        best = Some(match best {
            None => (o, r),
            Some((bo, br)) => (
                if o.usec() < bo.usec() { o } else { bo },
                if r.usec() < br.usec() { r } else { br },
            ),
        });
    }
    best.ok_or_else(|| "no run".to_owned())
}

/// The two count rows.
pub async fn counts(ctx: &Ctx) -> Vec<Row> {
    let enqueue_scenario = "redis server usec per enqueue, 1 msg per call (ratio raw ÷ ours)";
    let delivery_scenario = "redis server usec per delivered message (ratio raw ÷ ours)";
    let server = match PrivateRedis::start().await {
        Ok(s) => s,
        Err(e) => {
            return [
                ("redis-usec-per-enqueue", enqueue_scenario),
                ("redis-usec-per-delivery", delivery_scenario),
            ]
            .into_iter()
            .map(|(k, s)| Row::not_run(k, s, Target::None, Status::Skipped(e.clone())))
            .collect();
        }
    };
    let url = server.url.clone();
    let enq_n = ctx.scale.n(5_000);
    let del_n = ctx.scale.n(10_000);
    let enqueue_row = match best_of(REPS, |log| enqueue(&url, enq_n, log)).await {
        Ok((ours, raw)) => {
            eprintln!("redis-usec-per-enqueue ours: {}", ours.describe());
            eprintln!("redis-usec-per-enqueue raw: {}", raw.describe());
            Row::peer_cost(
                "redis-usec-per-enqueue",
                enqueue_scenario,
                ctx.scale.label(enq_n),
                Figure::per_delivery(ours.usec(), "µs/enqueue"),
                Figure::per_delivery(raw.usec(), "µs/enqueue"),
                Target::None,
                format!(
                    "private redis-server; commandstats usec of the entries; ours: {}; raw: {}",
                    ours.describe(),
                    raw.describe()
                ),
            )
        }
        Err(e) => Row::not_run(
            "redis-usec-per-enqueue",
            enqueue_scenario,
            Target::None,
            Status::Error(e),
        ),
    };
    let target = Target::MinRatio(1.0 / 1.5);
    let delivery_row = match best_of(REPS, |log| delivery(&url, del_n, log)).await {
        Ok((ours, raw)) => {
            eprintln!("redis-usec-per-delivery ours: {}", ours.describe());
            eprintln!("redis-usec-per-delivery raw: {}", raw.describe());
            Row::peer_cost(
                "redis-usec-per-delivery",
                delivery_scenario,
                ctx.scale.label(del_n),
                Figure::per_delivery(ours.usec(), "µs/delivery"),
                Figure::per_delivery(raw.usec(), "µs/delivery"),
                target,
                format!(
                    "private redis-server; batch {BATCH}; commandstats usec of the entries; ours: {}; \
                     raw: {}",
                    ours.describe(),
                    raw.describe()
                ),
            )
        }
        Err(e) => Row::not_run(
            "redis-usec-per-delivery",
            delivery_scenario,
            target,
            Status::Error(e),
        ),
    };
    drop(server);
    vec![enqueue_row, delivery_row]
}

/// Server work of `n` enqueues from 8 writers: ours, then raw.
async fn enqueue(url: &str, n: usize, log: bool) -> BenchResult<(Work, Work)> {
    let u = unique();
    let st = store(url, &format!("{{count-{u}}}")).await?;
    let mut conn = connection(url).await?;
    let ours = measure(&mut conn, log, || async {
        ours_enqueues(&st, n, 8).await?;
        Ok(n as u64)
    })
    .await?;
    let script = Arc::new(Script::new(RAW_ENQUEUE));
    let raw_prefix = Arc::new(format!("{{count-raw-{u}}}"));
    let c2 = conn.clone();
    let raw = measure(&mut conn, log, || async move {
        raw_enqueues(&c2, &script, &raw_prefix, n, 8).await?;
        Ok(n as u64)
    })
    .await?;
    Ok((ours, raw))
}

/// Server work per delivered message of a backlog of `n`: ours, then raw.
async fn delivery(url: &str, n: usize, log: bool) -> BenchResult<(Work, Work)> {
    let u = unique();
    let st = store(url, &format!("{{count-{u}}}")).await?;
    load(&st, n).await?;
    let mut conn = connection(url).await?;
    let ours = measure(&mut conn, log, || async {
        let progress = Progress::new(n as u64);
        let d = noop_dispatcher(Arc::new(st.clone()), &progress, burn_config())?;
        burn_down(&d, &progress, n as u64, None).await?;
        Ok(n as u64)
    })
    .await?;
    let stats = outboxkit_core::OperatorStore::stats(&st)
        .await
        .map_err(err("stats"))?;
    if stats.succeeded != n as u64 {
        return Err(format!("{} of {n} deliveries succeeded", stats.succeeded));
    }
    let raw_prefix = format!("{{count-raw-{u}}}");
    raw_load(&mut conn, &raw_prefix, n).await?;
    let mut c2 = conn.clone();
    let raw = measure(&mut conn, log, || async move {
        let done = raw_burn(&mut c2, &raw_prefix).await?;
        if done != n as u64 {
            return Err(format!("the raw loop completed {done} of {n}"));
        }
        Ok(done)
    })
    .await?;
    Ok((ours, raw))
}
