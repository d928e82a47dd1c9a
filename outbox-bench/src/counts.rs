//! Instructions per delivery, counted under `valgrind --tool=callgrind`: a count the load on
//! the machine does not move, so it can be taken while other work runs.
//!
//! The scenario runs this binary again as a child (`--child-count SIDE N`) under callgrind,
//! once per side and size:
//!
//! - `ours`: the dispatcher with `HttpTransport` (signed, the relay's defaults, one
//!   endpoint, concurrency 1) over `InMemoryStore`, to the lean hyper receiver;
//! - `null`: the same with a transport that answers 200 at once (the engine alone);
//! - `raw`: reqwest POSTs of the same envelope bodies, one at a time, to the same receiver.
//!
//! The child prepares everything (store, endpoint, backlog, client) first; only
//! [`counted`] (the burn-down, or the raw loop) and the receiver's thread are collected
//! (`--collect-atstart=no --toggle-collect=*counted*`), each thread in a file of its own
//! (`--separate-threads=yes`): the receiver runs on a thread of its own (thread 2), the
//! sender on the main one. A per-delivery figure is the difference between a run of
//! [`LARGE`] and one of [`SMALL`] deliveries, divided by the difference in deliveries, so
//! the fixed costs (the first connection, lazy initialisation) drop out.
//!
//! The split of a delivery: the engine is the `null` sender less signing; within it the
//! store's claim and its writes of the settle (`complete_many`, `release`) are their
//! functions' inclusive counts (`callgrind_annotate --inclusive=yes`); signing and envelope
//! building is `signed_request`'s; the transport is the `ours` sender less the `null`
//! sender; the receiver is thread 2. Under valgrind SHA-256 runs its portable code (the
//! CPU's SHA extensions are not offered), so signing counts more than it costs natively.
//!
//! `OUTBOX_BENCH_COUNT_EXE=PATH` runs another build's binary as the children (the counts of
//! an older commit, read the same way).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::common::BenchResult;
use crate::report::{Figure, Row, Status, Target};
use crate::webhook::{bodies, http, post_all, prepare, raw_client, NullTransport, Receiver};
use crate::Ctx;

/// The smaller run's deliveries.
pub const SMALL: usize = 200;
/// The larger run's deliveries.
pub const LARGE: usize = 1_200;

/// The sides a child can run.
pub const SIDES: [&str; 3] = ["ours", "null", "raw"];

/// Functions whose inclusive counts split the sender's work: (part, name fragments).
const PARTS: &[(&str, &[&str])] = &[
    (
        "signing",
        &["outboxkit_core::webhook_request::signed_request"],
    ),
    (
        "claim",
        &["DeliveryStore for outboxkit_testing::memory::InMemoryStore>::claim"],
    ),
    (
        "settle",
        &[
            "DeliveryStore for outboxkit_testing::memory::InMemoryStore>::complete_many",
            "DeliveryStore for outboxkit_testing::memory::InMemoryStore>::release",
        ],
    ),
    (
        "send",
        &["HttpTransport as outboxkit_core::transport::WebhookTransport>::send"],
    ),
];

/// What a child prints (one JSON line on stdout).
#[derive(Debug, Serialize, Deserialize)]
pub struct ChildReport {
    /// Deliveries (or raw requests) made.
    pub deliveries: u64,
    /// Deliveries claimed ÷ deliveries settled (0 for `raw`).
    pub claims_per_delivery: f64,
}

/// Everything in here is collected by callgrind (the name is what `--toggle-collect`
/// matches); nothing outside it on the same thread is.
#[inline(never)]
pub fn counted<T>(f: impl FnOnce() -> T) -> T {
    std::hint::black_box(f())
}

/// The child: run `side` over `n` deliveries, the measured part inside [`counted`].
pub fn child(side: &str, n: usize) -> ExitCode {
    match child_run(side, n) {
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

fn runtime() -> BenchResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

/// The receiver on a thread of its own (the second thread of the process), collected from
/// its start; returns its URL.
fn receiver_thread() -> BenchResult<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("receiver".into())
        .spawn(move || {
            let Ok(rt) = runtime() else { return };
            counted(|| {
                rt.block_on(async move {
                    let r = Receiver::start().await;
                    let _ = tx.send(r.as_ref().map(Receiver::url).map_err(|e| e.to_string()));
                    if let Ok(keep) = r {
                        std::future::pending::<()>().await;
                        drop(keep);
                    }
                });
            });
        })
        .map_err(|e| format!("receiver thread: {e}"))?;
    rx.recv()
        .map_err(|_| "the receiver thread ended".to_owned())?
        .map_err(|e| format!("receiver: {e}"))
}

fn child_run(side: &str, n: usize) -> BenchResult<ChildReport> {
    let url = receiver_thread()?;
    let rt = runtime()?;
    match side {
        "ours" | "null" => {
            let transport: Arc<outboxkit_core::DynWebhookTransport> = if side == "ours" {
                http()?
            } else {
                Arc::new(NullTransport)
            };
            let (d, progress, n) = rt.block_on(prepare(&url, n, 1, 1, transport))?;
            let b = counted(|| rt.block_on(crate::common::burn_down(&d, &progress, n, None)))?;
            Ok(ChildReport {
                deliveries: b.completed,
                claims_per_delivery: b.claims_per_delivery,
            })
        }
        "raw" => {
            let client = raw_client()?;
            let set: Arc<Vec<Bytes>> = Arc::new(bodies(n));
            counted(|| rt.block_on(post_all(client, &url, set, 1, Arc::new(|_, r| r))))?;
            Ok(ChildReport {
                deliveries: n as u64,
                claims_per_delivery: 0.0,
            })
        }
        other => Err(format!("--child-count {other}: expected ours, null or raw")),
    }
}

/// The counts of one child run: the sender's threads, the receiver's, and the parts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// Every thread but the receiver's.
    pub sender: f64,
    /// The receiver's thread.
    pub receiver: f64,
    /// The inclusive count of each of [`PARTS`] on the sender's threads.
    pub parts: Vec<(String, f64)>,
    /// What the child reported.
    pub claims_per_delivery: f64,
}

impl Counts {
    fn part(&self, name: &str) -> f64 {
        self.parts
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |(_, v)| *v)
    }

    /// Per delivery: (`self` − `small`) ÷ `deliveries`.
    fn per_delivery(&self, small: &Counts, deliveries: f64) -> Counts {
        let d = |a: f64, b: f64| (a - b) / deliveries;
        Counts {
            sender: d(self.sender, small.sender),
            receiver: d(self.receiver, small.receiver),
            parts: self
                .parts
                .iter()
                .map(|(n, v)| (n.clone(), d(*v, small.part(n))))
                .collect(),
            claims_per_delivery: self.claims_per_delivery,
        }
    }
}

/// The `totals:` (or `summary:`) figure and the `thread:` number of a callgrind output file.
pub fn parse_totals(text: &str) -> (Option<u32>, f64) {
    let mut thread = None;
    let mut total = 0.0;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("thread:") {
            thread = t.trim().parse().ok();
        } else if let Some(v) = line
            .strip_prefix("totals:")
            .or_else(|| line.strip_prefix("summary:"))
        {
            total = v
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(0.0);
        }
    }
    (thread, total)
}

/// The inclusive count of every function whose name contains one of `fragments`, from
/// `callgrind_annotate --inclusive=yes` output (`12,345 (1.2%)  file:function [object]`, or
/// without the percentage). A function with code inlined from other files is listed once
/// per file, and its entry under its own file already holds the calls made from the inlined
/// code (the entries of the inlined files repeat them): the largest entry of each function
/// is its count, and different functions add up. Nested matches are not subtracted (the
/// fragments name functions that do not call each other).
pub fn inclusive(annotate: &str, fragments: &[&str]) -> f64 {
    let mut functions: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for line in annotate
        .lines()
        .filter(|l| fragments.iter().any(|f| l.contains(f)))
    {
        let mut parts = line.split_whitespace();
        let Some(v) = parts
            .next()
            .and_then(|first| first.replace(',', "").parse::<f64>().ok())
        else {
            continue;
        };
        // The entry: what follows the count and the percentage, without the object.
        let rest = line.trim_start();
        let rest = rest[rest.find(char::is_whitespace).unwrap_or(rest.len())..].trim_start();
        let rest = match rest.strip_prefix('(') {
            Some(r) => r.split_once(')').map_or(r, |(_, after)| after).trim_start(),
            None => rest,
        };
        let entry = rest.split(" [").next().unwrap_or(rest).trim_end();
        // `file:function`: a path holds no `:`, a function name holds `::`.
        let function = entry.split_once(':').map_or(entry, |(_, f)| f);
        let slot = functions.entry(function).or_insert(0.0);
        *slot = slot.max(v);
    }
    functions.values().sum()
}

async fn valgrind_version() -> Option<String> {
    let out = tokio::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Run one child under callgrind and read its counts.
async fn measure(dir: &Path, side: &str, n: usize) -> BenchResult<Counts> {
    // `OUTBOX_BENCH_COUNT_EXE`: count another build's children (before and after a change).
    let exe = match std::env::var_os("OUTBOX_BENCH_COUNT_EXE") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?,
    };
    let base = dir.join(format!("{side}-{n}.out"));
    let out = tokio::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--separate-threads=yes")
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=*counts::counted*")
        .arg(format!("--callgrind-out-file={}", base.display()))
        .arg(&exe)
        .args(["--child-count", side, &n.to_string()])
        .output()
        .await
        .map_err(|e| format!("valgrind: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!("the {side} child failed: {}", tail.join(" / ")));
    }
    let report: ChildReport = serde_json::from_slice(
        out.stdout
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap_or_default(),
    )
    .map_err(|e| format!("the {side} child's report: {e}"))?;
    let mut counts = Counts {
        claims_per_delivery: report.claims_per_delivery,
        parts: PARTS.iter().map(|(p, _)| ((*p).to_owned(), 0.0)).collect(),
        ..Counts::default()
    };
    for file in thread_files(dir, &base)? {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("read: {e}"))?;
        let (thread, total) = parse_totals(&text);
        if thread == Some(2) {
            counts.receiver += total;
            continue;
        }
        counts.sender += total;
        // Run where no source is found: paths stay as recorded, each entry listed once.
        let annotated = tokio::process::Command::new("callgrind_annotate")
            .args(["--inclusive=yes", "--threshold=100", "--auto=no"])
            .arg(&file)
            .current_dir(dir)
            .output()
            .await
            .map_err(|e| format!("callgrind_annotate: {e}"))?;
        let text = String::from_utf8_lossy(&annotated.stdout);
        for (part, fragments) in PARTS {
            let v = inclusive(&text, fragments);
            if let Some(slot) = counts.parts.iter_mut().find(|(n, _)| n == part) {
                slot.1 += v;
            }
        }
    }
    Ok(counts)
}

/// The files callgrind wrote for the run with output `base` (`base-01`, `base-02`, …).
fn thread_files(dir: &Path, base: &Path) -> BenchResult<Vec<PathBuf>> {
    let prefix = base
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("read_dir: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("callgrind wrote no {prefix}* file"));
    }
    Ok(files)
}

/// Each side's per-delivery counts.
pub struct Measured {
    /// `ours`, `null`, `raw`.
    pub sides: Vec<(String, Counts)>,
}

impl Measured {
    fn side(&self, name: &str) -> Counts {
        self.sides
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
            .unwrap_or_default()
    }
}

async fn measure_all(dir: &Path) -> BenchResult<Measured> {
    let mut sides = Vec::new();
    for side in SIDES {
        let small = measure(dir, side, SMALL).await?;
        let large = measure(dir, side, LARGE).await?;
        sides.push((
            side.to_owned(),
            large.per_delivery(&small, (LARGE - SMALL) as f64),
        ));
    }
    Ok(Measured { sides })
}

fn instr(v: f64) -> Figure {
    Figure::per_delivery(v, "instr/delivery")
}

/// The two rows from the measured counts.
pub fn rows(m: &Measured) -> Vec<Row> {
    let (ours, null, raw) = (m.side("ours"), m.side("null"), m.side("raw"));
    let signing = ours.part("signing");
    let engine = null.sender - null.part("signing");
    let transport = ours.sender - null.sender;
    let size = format!("{} deliveries ({LARGE} − {SMALL}), c = 1", LARGE - SMALL);
    let k = |v: f64| crate::report::si(v);
    let split = format!(
        "ours per delivery: engine {} (store claim {}, settle {}, the rest of the loop {}), \
         signing + envelope {}, transport {} (HttpTransport::send {}), receiver {}; raw per \
         request: client {}, receiver {}; {:.2} claims per delivery; sender threads only \
         (the receiver is the same lean hyper server for both)",
        k(engine),
        k(null.part("claim")),
        k(null.part("settle")),
        k(engine - null.part("claim") - null.part("settle")),
        k(signing),
        k(transport),
        k(ours.part("send")),
        k(ours.receiver),
        k(raw.sender),
        k(raw.receiver),
        ours.claims_per_delivery,
    );
    vec![
        Row::peer_cost(
            "webhook-instructions-per-delivery",
            "instructions per signed webhook delivery vs one raw reqwest POST (callgrind)",
            size.clone(),
            instr(ours.sender),
            instr(raw.sender),
            Target::MinRatio(0.5),
            format!("ratio = raw ÷ ours; {split}"),
        ),
        Row::peer_cost(
            "noop-instructions-per-delivery",
            "instructions per delivery with a no-op transport (the engine) vs one raw POST",
            size,
            instr(null.sender),
            instr(raw.sender),
            Target::MinRatio(4.0),
            format!(
                "ratio = raw ÷ ours: 4 means the engine costs a quarter of a raw request; \
                 engine {} + signing {} + no-op transport",
                k(engine),
                k(null.part("signing"))
            ),
        ),
    ]
}

const KEYS: [&str; 2] = [
    "webhook-instructions-per-delivery",
    "noop-instructions-per-delivery",
];

/// The scenario: skipped when valgrind is not installed.
pub async fn run(ctx: &Ctx) -> Vec<Row> {
    let target = [Target::MinRatio(0.5), Target::MinRatio(4.0)];
    let not_run = |status: Status| {
        KEYS.iter()
            .zip(target)
            .map(|(k, t)| {
                Row::not_run(
                    k,
                    "instructions per delivery (callgrind)",
                    t,
                    status.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    if valgrind_version().await.is_none() {
        return not_run(Status::Skipped(
            "valgrind is not installed (apt-get install valgrind)".to_owned(),
        ));
    }
    let dir = ctx
        .scratch
        .join(format!("callgrind-{}", crate::common::unique()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return not_run(Status::Error(format!("scratch: {e}")));
    }
    let r = measure_all(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok(m) => rows(&m),
        Err(e) => not_run(Status::Error(e)),
    }
}

#[cfg(test)]
#[path = "counts_tests.rs"]
mod tests;
