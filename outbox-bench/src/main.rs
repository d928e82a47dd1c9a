//! # outbox-bench
//!
//! The benchmark harness behind `cargo xtask bench [--quick] [--only NAME]`.
//! Each scenario runs the library the way a user would and, in the same run on the same
//! machine, a raw baseline doing the same work by hand; the table shows both rates, their
//! ratio, the target and whether it is met. The table is printed and written to
//! `target/bench/bench.{json,md}`.
//!
//! - `--quick` divides every size by ten (the RSS pair becomes 10k vs 100k) and says so in
//!   the size column.
//! - `--only NAME[,NAME…]` runs the scenarios whose key contains one of the names
//!   (`--list` prints the keys).
//! - Backends come from `OUTBOX_BENCH_POSTGRES_URL` (default
//!   `postgres://postgres@127.0.0.1:5432/test`), `OUTBOX_BENCH_REDIS_URL` (default
//!   `redis://127.0.0.1:6379`) and `OUTBOX_BENCH_NATS_URL` (default `nats://127.0.0.1:4222`);
//!   an unreachable one is reported as skipped.
//! - Every scenario works in a fresh schema, file or key prefix and removes it afterwards.
//!
//! Nothing here asserts a timing; the unit tests cover the pure helpers only.

mod broker;
mod catalog;
mod common;
mod counts;
mod isolation;
mod mail;
mod memory;
mod peer;
mod peer_enqueue;
mod pg;
mod pg_dispatch;
mod pg_purge;
mod pg_retries;
mod physical;
mod quiet;
mod redis_bench;
mod redis_counts;
mod report;
mod sqlite;
mod sqlite_counts;
mod timed;
mod webhook;

use std::path::PathBuf;
use std::process::ExitCode;

use outboxkit_core::{Clock, Stopwatch, SystemClock};
use serde::Serialize;

use crate::catalog::{BACKEND_ROWS, SCENARIOS};
use crate::common::Scale;
use crate::report::{markdown_table, text_table, Row, Status};

/// What every scenario needs to know.
#[derive(Clone, Debug)]
pub struct Ctx {
    /// Full or quick.
    pub scale: Scale,
    /// The PostgreSQL URL.
    pub pg_url: String,
    /// The Redis URL.
    pub redis_url: String,
    /// Where scratch files go (SQLite databases).
    pub scratch: PathBuf,
    /// The NATS (JetStream) URL.
    pub nats_url: String,
}

impl Ctx {
    /// How many times the short measurements alternate ours and raw (the best rate of
    /// each is kept, to damp other work on the machine): 3 in a full run, 1 in a quick one.
    pub fn reps(&self) -> usize {
        if self.scale.quick {
            1
        } else {
            3
        }
    }
}

#[derive(Debug, Default)]
struct Args {
    quick: bool,
    size: Option<usize>,
    only: Vec<String>,
    list: bool,
    child: Option<(String, u64)>,
    /// `--child-count SIDE N`: one side of the instruction counts (run under callgrind).
    count_child: Option<(String, usize)>,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut out = Args::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => out.quick = true,
            "--list" => out.list = true,
            "--size" => {
                let n = it
                    .next()
                    .and_then(|v| v.replace('_', "").parse().ok())
                    .ok_or("--size needs a number")?;
                out.size = Some(n);
            }
            "--only" => {
                let v = it.next().ok_or("--only needs a scenario name")?;
                out.only.extend(
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from),
                );
            }
            "--child-rss" => {
                let schema = it.next().ok_or("--child-rss needs a schema")?.clone();
                let count = it
                    .next()
                    .and_then(|c| c.parse().ok())
                    .ok_or("--child-rss needs a count")?;
                out.child = Some((schema, count));
            }
            "--child-count" => {
                let side = it.next().ok_or("--child-count needs a side")?.clone();
                let n = it
                    .next()
                    .and_then(|c| c.parse().ok())
                    .ok_or("--child-count needs a count")?;
                out.count_child = Some((side, n));
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(out)
}

fn selected(only: &[String], key: &str) -> bool {
    only.is_empty() || only.iter().any(|o| key.contains(o.as_str()))
}

const USAGE: &str =
    "usage: outbox-bench [--quick] [--only NAME[,NAME...]] [--size N] [--list]\n\n  \
    --quick  every size divided by ten (finishes in a few minutes)\n  \
    --size   use N as every selected scenario's size (profiling)\n  \
    --only   run the scenarios whose key contains NAME (see --list)\n  \
    --list   print the scenario keys";

/// The machine and backend versions, for the report header.
#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    memory_mib: u64,
    kernel: String,
    /// The 1-minute load average before and after the run (other work on the machine).
    load: (String, String),
    /// `git describe --always --dirty` of the workspace measured.
    commit: String,
    postgres: Option<String>,
    redis: Option<String>,
    sqlite: String,
    nats: Option<String>,
}

/// The workspace's commit, `-dirty` when the working tree differs from it.
fn git_describe() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The 1-minute load average.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}

/// The 1-minute load average as a number (`None` when unreadable).
fn load_value() -> Option<f64> {
    loadavg().parse().ok()
}

/// Mark the measured rows of a scenario noisy when the load before it was high or other
/// processes used CPU during it (see `quiet.rs`).
fn mark_noisy(rows: &mut [Row], before: Option<f64>, others: f64) {
    if let Some(why) = report::noisy_reason(before, others) {
        for r in rows {
            r.mark_noisy(&why);
        }
    }
}

fn meminfo_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

#[derive(Debug, Serialize)]
struct Output<'a> {
    quick: bool,
    started_at: String,
    seconds: f64,
    machine: &'a Machine,
    rows: &'a [Row],
}

fn skipped_rows(key: &str, why: &str) -> Vec<Row> {
    BACKEND_ROWS
        .iter()
        .filter(|r| r.0 == key)
        .map(|r| Row::not_run(r.1, r.2, r.3, Status::Skipped(why.to_owned())))
        .collect()
}

async fn run(args: Args) -> ExitCode {
    let scale = Scale {
        quick: args.quick,
        size: args.size,
    };
    let ctx = Ctx {
        scale,
        pg_url: std::env::var("OUTBOX_BENCH_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned()),
        redis_url: std::env::var("OUTBOX_BENCH_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned()),
        scratch: out_dir().join(format!("scratch-{}", common::unique())),
        nats_url: std::env::var("OUTBOX_BENCH_NATS_URL")
            .unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned()),
    };
    let started_at = SystemClock.now().to_rfc3339();
    let sw = Stopwatch::start();
    let mut machine = Machine {
        cpus: std::thread::available_parallelism().map_or(0, usize::from),
        memory_mib: meminfo_mib(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default(),
        load: (loadavg(), String::new()),
        commit: git_describe(),
        postgres: pg::probe(&ctx.pg_url).await,
        redis: redis_bench::probe(&ctx.redis_url).await,
        sqlite: rusqlite::version().to_owned(),
        nats: broker::probe(&ctx.nats_url).await,
    };
    eprintln!(
        "outbox-bench ({}) at {}: {} cpus, {} MiB; postgres {}, redis {}, sqlite {}; load {}",
        if scale.quick { "quick" } else { "full" },
        machine.commit,
        machine.cpus,
        machine.memory_mib,
        machine.postgres.as_deref().unwrap_or("unreachable"),
        machine.redis.as_deref().unwrap_or("unreachable"),
        machine.sqlite,
        machine.load.0
    );
    let pg_up = machine.postgres.is_some();
    let redis_up = machine.redis.is_some();
    let nats_up = machine.nats.is_some();
    let mut rows: Vec<Row> = Vec::new();
    for (key, _) in SCENARIOS {
        if !selected(&args.only, key) {
            continue;
        }
        // Instruction counts do not move with the load: no wait for it to settle.
        let load_before = if *key == "instructions" {
            load_value()
        } else {
            quiet::settle(load_value, report::NOISY_LOAD).await
        };
        eprintln!("== {key} (load {})", loadavg());
        let cpu = quiet::Sample::now();
        let sw = Stopwatch::start();
        let down = match *key {
            k if (k.starts_with("pg-") || k.starts_with("pgmq-")) && !pg_up => {
                Some("postgres unreachable")
            }
            k if k.starts_with("redis-") && !redis_up => Some("redis unreachable"),
            k if k.starts_with("broker-") && !nats_up => Some("nats unreachable"),
            _ => None,
        };
        let mut new: Vec<Row> = match (*key, down) {
            (_, Some(why)) => skipped_rows(key, why),
            ("pg-enqueue", _) => pg::enqueue(&ctx).await,
            ("pg-bulk", _) => vec![pg::bulk(&ctx).await],
            ("pg-dispatch", _) => vec![pg_dispatch::dispatch(&ctx).await],
            ("pg-retries", _) => vec![pg_retries::retries(&ctx).await],
            ("pg-purge", _) => vec![pg_purge::purge_under_load(&ctx).await],
            ("pg-latency", _) => pg_dispatch::latency(&ctx).await,
            ("pg-rss", _) => vec![pg_dispatch::rss(&ctx).await],
            ("pgmq-drain", _) => peer::drain(&ctx).await,
            ("pgmq-enqueue", _) => peer_enqueue::enqueue(&ctx).await,
            ("pgmq-bulk", _) => vec![peer_enqueue::bulk(&ctx).await],
            ("sqlite-enqueue", _) => vec![sqlite::enqueue(&ctx).await],
            ("sqlite-dispatch", _) => vec![sqlite::dispatch(&ctx).await],
            ("sqlite-counts", _) => sqlite_counts::counts(&ctx).await,
            ("redis-enqueue", _) => vec![redis_bench::enqueue(&ctx).await],
            ("redis-dispatch", _) => vec![redis_bench::dispatch(&ctx).await],
            ("redis-cluster", _) => vec![redis_bench::cluster(&ctx).await],
            ("redis-counts", _) => redis_counts::counts(&ctx).await,
            ("memory-dispatch", _) => vec![memory::dispatch(&ctx).await],
            ("webhook", _) => webhook::run(&ctx).await,
            ("relay-defaults", _) => vec![webhook::relay_defaults(&ctx).await],
            ("mail-http", _) => mail::run(&ctx).await,
            ("instructions", _) => counts::run(&ctx).await,
            ("broker-nats", _) => broker::run(&ctx).await,
            ("isolation-hang", _) => vec![isolation::hang(&ctx).await],
            ("isolation-tenants", _) => isolation::tenants(&ctx).await,
            _ => Vec::new(),
        };
        let others = cpu.others_since();
        let load_after = load_value();
        if *key != "instructions" {
            mark_noisy(&mut new, load_before, others);
        }
        eprint!("{}", text_table(&new));
        eprintln!(
            "   ({:.1} s; load {} before, {} after; other processes {others:.2} cores)",
            sw.elapsed().as_secs_f64(),
            load_before.map_or_else(|| "?".to_owned(), |l| format!("{l:.2}")),
            load_after.map_or_else(|| "?".to_owned(), |l| format!("{l:.2}"))
        );
        rows.extend(new);
    }
    let _ = std::fs::remove_dir_all(&ctx.scratch);
    machine.load.1 = loadavg();
    let seconds = sw.elapsed().as_secs_f64();
    println!();
    print!("{}", text_table(&rows));
    println!(
        "\n{} run in {:.0} s{}; load average {} before, {} after",
        if scale.quick { "quick" } else { "full" },
        seconds,
        if scale.quick {
            " (sizes divided by ten)"
        } else {
            ""
        },
        machine.load.0,
        machine.load.1
    );
    let out = Output {
        quick: scale.quick,
        started_at,
        seconds,
        machine: &machine,
        rows: &rows,
    };
    if let Err(e) = write_outputs(&out) {
        eprintln!("could not write target/bench: {e}");
    }
    if rows.iter().any(|r| matches!(r.status, Status::Error(_))) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `target/bench` of this workspace (or `OUTBOX_BENCH_OUT`).
fn out_dir() -> PathBuf {
    std::env::var_os("OUTBOX_BENCH_OUT").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("bench")
        },
        PathBuf::from,
    )
}

fn write_outputs(out: &Output<'_>) -> std::io::Result<()> {
    let dir = out_dir();
    std::fs::create_dir_all(&dir)?;
    let json = serde_json::to_string_pretty(out).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("bench.json"), json)?;
    let m = out.machine;
    let md = format!(
        "# outbox benchmarks ({} run, {})\n\n\
         Machine: {} CPUs, {} MiB, Linux {}; PostgreSQL {}, Redis {}, SQLite {}. \
         Commit {}. Run time {:.0} s; 1-minute load average {} before, {} after.\n\n{}",
        if out.quick {
            "quick: sizes ÷ 10"
        } else {
            "full"
        },
        out.started_at,
        m.cpus,
        m.memory_mib,
        m.kernel,
        m.postgres.as_deref().unwrap_or("unreachable"),
        m.redis.as_deref().unwrap_or("unreachable"),
        m.sqlite,
        m.commit,
        out.seconds,
        m.load.0,
        m.load.1,
        markdown_table(out.rows)
    );
    std::fs::write(dir.join("bench.md"), md)?;
    eprintln!("wrote {}", dir.join("bench.{json,md}").display());
    Ok(())
}

fn child(schema: &str, count: u64) -> ExitCode {
    let url = std::env::var("OUTBOX_BENCH_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(pg_dispatch::child_rss(&url, schema, count)) {
        Ok(r) => {
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().is_some_and(|a| a == "--child-sqlite-instr") {
        return sqlite_counts::child_main(&argv[1..]);
    }
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("{e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    if let Some((schema, count)) = &args.child {
        return child(schema, *count);
    }
    if let Some((side, n)) = &args.count_child {
        return counts::child(side, *n);
    }
    if args.list {
        for (key, what) in SCENARIOS {
            println!("{key:<16} {what}");
        }
        return ExitCode::SUCCESS;
    }
    match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => {
            eprintln!("runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
#[path = "main_tests.rs"]
mod tests;
