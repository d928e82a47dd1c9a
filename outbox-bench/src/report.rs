//! The result table: rows, targets, verdicts, and their text, Markdown and JSON forms. Pure
//! (no I/O beyond what the caller writes), so it is unit-tested.

use std::fmt::Write as _;

use serde::Serialize;

/// A measured figure with its unit (`msg/s`, `req/s`, `ms`, `MiB`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Figure {
    /// The value.
    pub value: f64,
    /// The unit.
    pub unit: &'static str,
}

impl Figure {
    /// A rate in messages (deliveries, rows) per second.
    pub fn rate(value: f64) -> Self {
        Figure {
            value,
            unit: "msg/s",
        }
    }

    /// A rate in requests per second.
    pub fn requests(value: f64) -> Self {
        Figure {
            value,
            unit: "req/s",
        }
    }

    /// A duration in milliseconds.
    pub fn millis(value: f64) -> Self {
        Figure { value, unit: "ms" }
    }

    /// Deliveries claimed per delivery settled (1.0: none claimed only to be handed back).
    pub fn claims(value: f64) -> Self {
        Figure {
            value,
            unit: "claims/delivery",
        }
    }

    /// A size in MiB.
    pub fn mib(value: f64) -> Self {
        Figure { value, unit: "MiB" }
    }

    /// A physical count per delivered message (`unit` ends in `/delivery`: `B/delivery`,
    /// `index tuples/delivery`).
    pub fn per_delivery(value: f64, unit: &'static str) -> Self {
        Figure { value, unit }
    }

    /// A share in per cent.
    pub fn percent(value: f64) -> Self {
        Figure { value, unit: "%" }
    }

    /// The short human form: `12.3k msg/s`, `4.20 ms`, `31.5 MiB`.
    pub fn human(&self) -> String {
        match self.unit {
            "ms" => format!("{:.2} ms", self.value),
            "MiB" => format!("{:.1} MiB", self.value),
            "%" => format!("{:.1} %", self.value),
            unit if unit.ends_with("/delivery") && self.value.abs() < 100.0 => {
                format!("{:.2} {unit}", self.value)
            }
            unit => format!("{} {unit}", si(self.value)),
        }
    }
}

/// `950`, `12.3k`, `1.25M`.
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.2}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// What a row is held to.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Target {
    /// Ours / baseline must be at least this fraction.
    MinRatio(f64),
    /// Ours (a latency in ms) must be at most this.
    MaxMillis(f64),
    /// Ours / baseline must be within 1 ± this fraction.
    Flat(f64),
    /// Ours / baseline (a slowdown) must be at most this.
    MaxRatio(f64),
    /// Ours (a count, such as claims per delivery) must be at most this.
    AtMost(f64),
    /// No target: the figure is reported only.
    None,
}

impl Target {
    /// The human form: `≥ 90 %`, `≤ 5 ms`, `±10 %`, `none`.
    pub fn human(&self) -> String {
        match self {
            Target::MinRatio(r) => format!("≥ {:.0} %", r * 100.0),
            Target::MaxMillis(ms) => format!("≤ {ms} ms"),
            Target::Flat(f) => format!("±{:.0} %", f * 100.0),
            Target::MaxRatio(r) => format!("≤ {r}×"),
            Target::AtMost(v) => format!("≤ {v}"),
            Target::None => "none".to_owned(),
        }
    }
}

/// How a row came out.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum Status {
    /// The target is met.
    Pass,
    /// The target is missed.
    Fail,
    /// Measured; there is no target.
    Info,
    /// Not run (the backend is unreachable, or excluded).
    Skipped(String),
    /// The scenario failed to run.
    Error(String),
    /// Measured on a busy machine (the 1-minute load average was above [`NOISY_LOAD`]
    /// before the scenario, or other processes used CPU during it): not a measurement. The reason keeps
    /// the load and the verdict the row would have had.
    Noisy(String),
}

/// A 1-minute load average above this before a scenario makes its rows noisy.
pub const NOISY_LOAD: f64 = 1.0;

impl Status {
    /// `pass`, `FAIL`, `info`, `skipped`, `error`.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "FAIL",
            Status::Info => "info",
            Status::Skipped(_) => "skipped",
            Status::Error(_) => "error",
            Status::Noisy(_) => "noisy",
        }
    }
}

/// One line of the table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The scenario's key (what `--only` matches).
    pub key: String,
    /// What was measured.
    pub scenario: String,
    /// How much (e.g. `100k`, `20k × c=16`).
    pub size: String,
    /// Our figure.
    pub ours: Option<Figure>,
    /// The raw baseline's figure.
    pub baseline: Option<Figure>,
    /// ours / baseline.
    pub ratio: Option<f64>,
    /// The target.
    pub target: Target,
    /// The verdict.
    pub status: Status,
    /// Settings and remarks.
    pub note: String,
}

impl Row {
    /// A measured row: the ratio and the verdict follow from the figures and the target.
    pub fn measured(
        key: &str,
        scenario: impl Into<String>,
        size: impl Into<String>,
        ours: Figure,
        baseline: Option<Figure>,
        target: Target,
        note: impl Into<String>,
    ) -> Self {
        let ratio = baseline
            .filter(|b| b.value > 0.0)
            .map(|b| ours.value / b.value);
        Row {
            key: key.to_owned(),
            scenario: scenario.into(),
            size: size.into(),
            ours: Some(ours),
            baseline,
            ratio,
            status: judge(target, ours, ratio),
            target,
            note: note.into(),
        }
    }

    /// A row whose figures are costs of ours and of a peer (lower is better), held to the
    /// peer's cost ÷ ours ([`cost_ratio`]: at least 1 means ours costs no more).
    pub fn peer_cost(
        key: &str,
        scenario: impl Into<String>,
        size: impl Into<String>,
        ours: Figure,
        peer: Figure,
        target: Target,
        note: impl Into<String>,
    ) -> Self {
        let ratio = cost_ratio(ours.value, peer.value);
        Row {
            key: key.to_owned(),
            scenario: scenario.into(),
            size: size.into(),
            ours: Some(ours),
            baseline: Some(peer),
            ratio,
            status: judge(target, ours, ratio),
            target,
            note: note.into(),
        }
    }

    /// Mark a measured row noisy (`why` says the load); rows that did not run keep
    /// their status.
    pub fn mark_noisy(&mut self, why: &str) {
        if matches!(self.status, Status::Pass | Status::Fail | Status::Info) {
            self.status = Status::Noisy(format!("{why}; would be {}", self.status.word()));
        }
    }

    /// A row that did not run.
    pub fn not_run(key: &str, scenario: impl Into<String>, target: Target, status: Status) -> Self {
        Row {
            key: key.to_owned(),
            scenario: scenario.into(),
            size: String::new(),
            ours: None,
            baseline: None,
            ratio: None,
            target,
            status,
            note: String::new(),
        }
    }
}

/// The verdict of a figure against a target.
pub fn judge(target: Target, ours: Figure, ratio: Option<f64>) -> Status {
    let ok = match target {
        Target::None => return Status::Info,
        Target::MinRatio(min) => ratio.is_some_and(|r| r >= min),
        Target::MaxMillis(max) => ours.value <= max,
        Target::Flat(tol) => ratio.is_some_and(|r| (r - 1.0).abs() <= tol),
        Target::MaxRatio(max) => ratio.is_some_and(|r| r <= max),
        Target::AtMost(max) => ours.value <= max,
    };
    if ok {
        Status::Pass
    } else {
        Status::Fail
    }
}

/// A peer's cost ÷ ours: above 1 when ours costs less. `None` when ours is not positive.
pub fn cost_ratio(ours: f64, peer: f64) -> Option<f64> {
    (ours > 0.0).then(|| peer / ours)
}

/// Why a scenario's rows are noisy: the 1-minute load average before it was above
/// [`NOISY_LOAD`] (after the bench waited for it to settle), or other processes used more
/// than [`crate::quiet::OTHERS_MAX`] cores during it; `None` when neither (an unreadable load
/// counts as quiet).
pub fn noisy_reason(before: Option<f64>, others: f64) -> Option<String> {
    let busy = before.is_some_and(|l| l > NOISY_LOAD);
    if busy || others > crate::quiet::OTHERS_MAX {
        let show = before.map_or_else(|| "?".to_owned(), |l| format!("{l:.2}"));
        Some(format!(
            "load {show} before, other processes {others:.2} cores"
        ))
    } else {
        None
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    })
}

/// The nearest-rank percentile `p` (0–100) of `values` (any order); `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// A rate from a count and seconds (0 when no time passed).
pub fn per_second(count: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

fn cells(r: &Row) -> [String; 8] {
    let fig = |f: &Option<Figure>| f.map_or_else(|| "—".to_owned(), |f| f.human());
    let status = match &r.status {
        Status::Skipped(why) | Status::Error(why) | Status::Noisy(why) => {
            format!("{} ({why})", r.status.word())
        }
        s => s.word().to_owned(),
    };
    [
        r.scenario.clone(),
        r.size.clone(),
        fig(&r.ours),
        fig(&r.baseline),
        r.ratio
            .map_or_else(|| "—".to_owned(), |x| format!("{:.0} %", x * 100.0)),
        r.target.human(),
        status,
        r.note.clone(),
    ]
}

const HEADER: [&str; 8] = [
    "scenario", "size", "ours", "baseline", "ratio", "target", "result", "notes",
];

/// The table as aligned plain text (the notes column last, unpadded).
pub fn text_table(rows: &[Row]) -> String {
    let all: Vec<[String; 8]> = std::iter::once(HEADER.map(str::to_owned))
        .chain(rows.iter().map(cells))
        .collect();
    let mut width = [0usize; 8];
    for r in &all {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &all {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i == 7 {
                line.push_str(c);
            } else {
                let pad = width[i] - c.chars().count();
                line.push_str(c);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The table as Markdown.
pub fn markdown_table(rows: &[Row]) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", HEADER.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(HEADER.len()));
    for r in rows {
        let c = cells(r).map(|c| esc(&c));
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 50.0), Some(2.0));
    }

    #[test]
    fn targets_judge_ratios_latencies_and_flatness() {
        let rate = Figure::rate(90.0);
        assert_eq!(judge(Target::MinRatio(0.9), rate, Some(0.9)), Status::Pass);
        assert_eq!(judge(Target::MinRatio(0.9), rate, Some(0.89)), Status::Fail);
        assert_eq!(judge(Target::MinRatio(0.9), rate, None), Status::Fail);
        let ms = Figure::millis(4.9);
        assert_eq!(judge(Target::MaxMillis(5.0), ms, None), Status::Pass);
        assert_eq!(
            judge(Target::MaxMillis(5.0), Figure::millis(5.1), None),
            Status::Fail
        );
        assert_eq!(judge(Target::Flat(0.1), rate, Some(1.08)), Status::Pass);
        assert_eq!(judge(Target::Flat(0.1), rate, Some(0.89)), Status::Fail);
        assert_eq!(judge(Target::None, rate, Some(0.01)), Status::Info);
        assert_eq!(judge(Target::MaxRatio(1.5), ms, Some(1.5)), Status::Pass);
        assert_eq!(judge(Target::MaxRatio(1.5), ms, Some(1.6)), Status::Fail);
    }

    #[test]
    fn measured_rows_compute_the_ratio() {
        let r = Row::measured(
            "x",
            "x",
            "1k",
            Figure::rate(80.0),
            Some(Figure::rate(100.0)),
            Target::MinRatio(0.7),
            "",
        );
        assert!((r.ratio.unwrap() - 0.8).abs() < 1e-9);
        assert_eq!(r.status, Status::Pass);
        let zero = Row::measured(
            "x",
            "x",
            "1k",
            Figure::rate(80.0),
            Some(Figure::rate(0.0)),
            Target::MinRatio(0.7),
            "",
        );
        assert_eq!(zero.ratio, None);
        assert_eq!(zero.status, Status::Fail);
    }

    #[test]
    fn figures_and_targets_print_briefly() {
        assert_eq!(si(950.0), "950");
        assert_eq!(si(1234.0), "1.23k");
        assert_eq!(si(12_345.0), "12.3k");
        assert_eq!(si(1_250_000.0), "1.25M");
        assert_eq!(Figure::millis(4.2).human(), "4.20 ms");
        assert_eq!(Figure::mib(31.54).human(), "31.5 MiB");
        assert_eq!(Figure::requests(12_345.0).human(), "12.3k req/s");
        assert_eq!(Target::MinRatio(0.9).human(), "≥ 90 %");
        assert_eq!(Target::MaxMillis(5.0).human(), "≤ 5 ms");
        assert_eq!(Target::Flat(0.1).human(), "±10 %");
        assert_eq!(per_second(100, 0.5), 200.0);
        assert_eq!(per_second(100, 0.0), 0.0);
    }

    #[test]
    fn tables_have_one_line_per_row_and_escape_pipes() {
        let rows = vec![
            Row::measured(
                "pg",
                "postgres | enqueue",
                "10k",
                Figure::rate(900.0),
                Some(Figure::rate(1000.0)),
                Target::MinRatio(0.9),
                "batch 100",
            ),
            Row::not_run(
                "redis",
                "redis dispatch",
                Target::MinRatio(0.5),
                Status::Skipped("redis unreachable".into()),
            ),
        ];
        let md = markdown_table(&rows);
        assert_eq!(md.lines().count(), 4);
        assert!(md.contains("postgres \\| enqueue"));
        assert!(md.contains("| 90 % | ≥ 90 % | pass |"));
        assert!(md.contains("skipped (redis unreachable)"));
        let text = text_table(&rows);
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().next().unwrap().starts_with("scenario"));
        let json = serde_json::to_value(&rows).unwrap();
        assert_eq!(json[0]["status"]["status"], "pass");
        assert_eq!(json[1]["status"]["reason"], "redis unreachable");
        assert_eq!(json[0]["target"]["kind"], "min_ratio");
    }

    #[test]
    fn peer_costs_are_held_to_the_peer_over_ours() {
        // Costs: lower is better, so the ratio is the peer's ÷ ours (≥ 1: ours costs no more).
        assert_eq!(cost_ratio(500.0, 1000.0), Some(2.0));
        assert_eq!(cost_ratio(1000.0, 500.0), Some(0.5));
        assert_eq!(cost_ratio(0.0, 500.0), None);
        let row = Row::peer_cost(
            "pg-wal-per-delivery",
            "wal",
            "50k",
            Figure::per_delivery(1513.0, "B/delivery"),
            Figure::per_delivery(1120.0, "B/delivery"),
            Target::MinRatio(1.0),
            "",
        );
        assert!((row.ratio.unwrap() - 1120.0 / 1513.0).abs() < 1e-12);
        assert_eq!(row.status, Status::Fail);
        let cheaper = Row::peer_cost(
            "pg-index-writes-per-delivery",
            "idx",
            "50k",
            Figure::per_delivery(3.0, "index tuples/delivery"),
            Figure::per_delivery(4.0, "index tuples/delivery"),
            Target::MinRatio(1.0),
            "",
        );
        assert_eq!(cheaper.status, Status::Pass);
        // Rates keep ours ÷ baseline.
        let rate = Row::measured(
            "pgmq-drain",
            "drain",
            "50k",
            Figure::rate(7400.0),
            Some(Figure::rate(10_000.0)),
            Target::MinRatio(1.0),
            "",
        );
        assert!((rate.ratio.unwrap() - 0.74).abs() < 1e-12);
        assert_eq!(
            Figure::per_delivery(8.0, "index tuples/delivery").human(),
            "8.00 index tuples/delivery"
        );
        assert_eq!(
            Figure::per_delivery(1513.0, "B/delivery").human(),
            "1.51k B/delivery"
        );
        assert_eq!(Figure::percent(93.25).human(), "93.2 %");
    }

    #[test]
    fn medians_and_noise() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
        assert_eq!(noisy_reason(Some(1.0), 0.25), None);
        assert_eq!(noisy_reason(None, 0.0), None);
        assert_eq!(
            noisy_reason(Some(1.25), 0.0).as_deref(),
            Some("load 1.25 before, other processes 0.00 cores")
        );
        assert_eq!(
            noisy_reason(None, 2.0).as_deref(),
            Some("load ? before, other processes 2.00 cores")
        );
    }
}
