//! Charts as server-rendered SVG (no script, no library): attempts per bucket by outcome
//! (stacked bars), an endpoint's success rate and mean latency (lines), over the last 1, 6
//! or 24 hours, from the store's activity query. Each chart has a `<title>` and `<desc>`,
//! an `aria-label` with its totals, a hover `<title>` per bar and a data table beside it.

use std::fmt::Write as _;
use std::time::Duration;

use outboxkit_core::{ActivityBucket, ActivityQuery, EndpointId, TenantId, Timestamp};

use super::console_store;
use super::time::exact;
use crate::html::{enc, esc};
use crate::problem::Problem;
use crate::state::Serve;

/// The ranges offered, in hours, and each one's bucket.
const RANGES: [(u32, u64); 3] = [(1, 60), (6, 300), (24, 900)];

const W: f64 = 720.0;
const H: f64 = 170.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 20.0;

/// The range asked for with `?hours=` (1, 6 or 24; default 1).
pub(super) fn hours_of(pairs: &[(String, String)]) -> Result<u32, Problem> {
    match pairs
        .iter()
        .find(|(k, _)| k == "hours")
        .map(|(_, v)| v.as_str())
    {
        None | Some("") => Ok(1),
        Some(h) => h
            .parse::<u32>()
            .ok()
            .filter(|h| RANGES.iter().any(|(r, _)| r == h))
            .ok_or_else(|| Problem::bad_request("must be 1, 6 or 24").field("hours")),
    }
}

/// The activity of the last `hours` up to `now` (the range ends at the bucket holding now).
pub(super) async fn activity(
    s: &Serve,
    tenant: &TenantId,
    endpoint: Option<EndpointId>,
    hours: u32,
) -> Result<(ActivityQuery, Vec<ActivityBucket>), Problem> {
    let store = console_store(s)?;
    let bucket = RANGES
        .iter()
        .find(|(h, _)| *h == hours)
        .map_or(60, |(_, b)| *b);
    let b_ms = bucket as i64 * 1000;
    let now = s.inner.now().as_unix_millis();
    let until = Timestamp::from_unix_millis_clamped((now / b_ms + 1) * b_ms);
    let q = ActivityQuery {
        tenant: tenant.clone(),
        endpoint,
        since: until.saturating_sub(Duration::from_secs(u64::from(hours) * 3600)),
        until,
        bucket: Duration::from_secs(bucket),
    };
    let buckets = store.activity(&q).await?;
    Ok((q, buckets))
}

/// Links to the other ranges of a page (`path` carries its query, `&hours=` is added).
pub(super) fn range_links(path: &str, hours: u32) -> String {
    let mut out = String::from("<p class=\"ranges\">Last ");
    for (h, _) in RANGES {
        let class = if h == hours { " class=\"here\"" } else { "" };
        let _ = write!(
            out,
            "<a href=\"{}&hours={h}\" id=\"range-{h}\"{class}>{h} h</a>",
            esc(path)
        );
    }
    out.push_str("</p>");
    out
}

fn hhmm(t: Timestamp) -> String {
    exact(t)[11..16].to_owned()
}

fn bucket_label(q: &ActivityQuery, b: &ActivityBucket) -> String {
    let end = b.start.saturating_add(q.bucket).min(q.until);
    format!("{}–{} UTC", hhmm(b.start), hhmm(end))
}

/// A round maximum for the y axis, at least `max`.
fn nice(max: f64) -> f64 {
    if max <= 1.0 {
        return 1.0;
    }
    let mag = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * mag >= max {
            return m * mag;
        }
    }
    10.0 * mag
}

/// The frame of a chart: axes, grid lines with labels, time labels.
fn axes(q: &ApproxRange, ymax: f64, unit: &str) -> String {
    let mut out = String::new();
    let plot_h = H - TOP - BOTTOM;
    for i in 0..=2 {
        let v = ymax * f64::from(i) / 2.0;
        let y = TOP + plot_h - plot_h * f64::from(i) / 2.0;
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{v}{unit}</text>",
            x2 = W - RIGHT,
            tx = LEFT - 4.0,
            ty = y + 3.0,
            v = (v * 10.0).round() / 10.0,
        );
    }
    let _ = write!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{y}\" y2=\"{y}\"/>\
         <text x=\"{LEFT}\" y=\"{ty}\">{start}</text>\
         <text x=\"{mid}\" y=\"{ty}\" text-anchor=\"middle\">{middle}</text>\
         <text x=\"{x2}\" y=\"{ty}\" text-anchor=\"end\">{end} UTC</text>",
        x2 = W - RIGHT,
        y = H - BOTTOM,
        ty = H - 6.0,
        mid = LEFT + (W - LEFT - RIGHT) / 2.0,
        start = esc(&q.start),
        middle = esc(&q.middle),
        end = esc(&q.end),
    );
    out
}

/// The time labels of a range.
struct ApproxRange {
    start: String,
    middle: String,
    end: String,
}

impl ApproxRange {
    fn of(q: &ActivityQuery) -> Self {
        let mid = Timestamp::from_unix_millis_clamped(
            (q.since.as_unix_millis() + q.until.as_unix_millis()) / 2,
        );
        ApproxRange {
            start: hhmm(q.since),
            middle: hhmm(mid),
            end: hhmm(q.until),
        }
    }
}

fn svg(id: &str, title: &str, desc: &str, inner: &str) -> String {
    format!(
        "<svg viewBox=\"0 0 {W} {H}\" role=\"img\" aria-labelledby=\"{id}-title {id}-desc\" \
         aria-label=\"{label}\" id=\"{id}-svg\" xmlns=\"http://www.w3.org/2000/svg\">\
         <title id=\"{id}-title\">{t}</title><desc id=\"{id}-desc\">{d}</desc>{inner}</svg>",
        label = esc(&format!("{title}: {desc}")),
        t = esc(title),
        d = esc(desc),
    )
}

/// Attempts per bucket by outcome, stacked: succeeded, failed (retried), dead.
pub(super) fn outcome_chart(
    id: &str,
    title: &str,
    q: &ActivityQuery,
    buckets: &[ActivityBucket],
) -> String {
    let (s, f, d) = buckets.iter().fold((0, 0, 0), |(s, f, d), b| {
        (s + b.succeeded, f + b.failed, d + b.dead)
    });
    let totals = format!("{s} succeeded, {f} failed, {d} dead");
    let ymax = nice(buckets.iter().map(|b| b.attempts()).max().unwrap_or(0) as f64);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let bw = plot_w / buckets.len().max(1) as f64;
    let mut bars = axes(&ApproxRange::of(q), ymax, "");
    for (i, b) in buckets.iter().enumerate() {
        if b.attempts() == 0 {
            continue;
        }
        let x = LEFT + bw * i as f64;
        let mut y = TOP + plot_h;
        let _ = write!(
            bars,
            "<g><title>{}: {} succeeded, {} failed, {} dead</title>",
            esc(&bucket_label(q, b)),
            b.succeeded,
            b.failed,
            b.dead
        );
        for (n, class) in [
            (b.succeeded, "succeeded"),
            (b.failed, "failed"),
            (b.dead, "dead"),
        ] {
            if n == 0 {
                continue;
            }
            let h = plot_h * n as f64 / ymax;
            y -= h;
            let _ = write!(
                bars,
                "<rect class=\"{class}\" x=\"{x:.2}\" y=\"{y:.2}\" width=\"{w:.2}\" height=\"{h:.2}\"/>",
                w = (bw - 1.0).max(0.5)
            );
        }
        bars.push_str("</g>");
    }
    let per = humantime(q.bucket);
    let desc = format!("attempts per {per} over the last {}; {totals}", span(q));
    let mut rows = String::new();
    for b in buckets.iter().filter(|b| b.attempts() > 0) {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&bucket_label(q, b)),
            b.succeeded,
            b.failed,
            b.dead
        );
    }
    format!(
        "<figure class=\"chart\" id=\"{id}\"><figcaption>{t} — attempts per {per} \
         <span class=\"legend\"><span class=\"succeeded\">succeeded</span><span class=\"failed\">failed</span>\
         <span class=\"dead\">dead</span></span> · <span id=\"{id}-totals\" data-succeeded=\"{s}\" \
         data-failed=\"{f}\" data-dead=\"{d}\">{totals}</span></figcaption>{svg}\
         <details class=\"data\"><summary>Data</summary><table id=\"{id}-table\"><thead><tr><th>Time</th>\
         <th>Succeeded</th><th>Failed</th><th>Dead</th></tr></thead><tbody>{rows}</tbody></table></details></figure>",
        t = esc(title),
        svg = svg(id, title, &desc, &bars),
    )
}

/// A line over the buckets that have a value: `(bucket index, value)`, on an axis up to
/// `ymax` in `unit`.
struct Line<'a> {
    points: Vec<(usize, f64)>,
    ymax: f64,
    unit: &'a str,
    class: &'a str,
    desc: String,
}

fn line_chart(id: &str, title: &str, q: &ActivityQuery, n: usize, line: &Line<'_>) -> String {
    let Line {
        points,
        ymax,
        unit,
        class,
        desc,
    } = line;
    let (ymax, desc) = (*ymax, desc.as_str());
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let bw = plot_w / n.max(1) as f64;
    let mut inner = axes(&ApproxRange::of(q), ymax, unit);
    let pts: Vec<String> = points
        .iter()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                LEFT + bw * (*i as f64 + 0.5),
                TOP + plot_h - plot_h * (v / ymax).min(1.0)
            )
        })
        .collect();
    if !pts.is_empty() {
        let _ = write!(
            inner,
            "<polyline class=\"line {class}\" points=\"{}\"/>",
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(
                inner,
                "<circle class=\"line {class}\" cx=\"{x}\" cy=\"{y}\" r=\"1.6\"/>"
            );
        }
    }
    format!(
        "<figure class=\"chart\" id=\"{id}\"><figcaption>{t} · <span id=\"{id}-summary\">{d}</span></figcaption>{svg}</figure>",
        t = esc(title),
        d = esc(desc),
        svg = svg(id, title, desc, &inner),
    )
}

/// The share of attempts that succeeded, per bucket with attempts.
pub(super) fn success_rate_chart(
    id: &str,
    q: &ActivityQuery,
    buckets: &[ActivityBucket],
) -> String {
    let points: Vec<(usize, f64)> = buckets
        .iter()
        .enumerate()
        .filter(|(_, b)| b.attempts() > 0)
        .map(|(i, b)| (i, 100.0 * b.succeeded as f64 / b.attempts() as f64))
        .collect();
    let (ok, all) = buckets
        .iter()
        .fold((0, 0), |(o, a), b| (o + b.succeeded, a + b.attempts()));
    let desc = match (100 * ok).checked_div(all) {
        None => format!("no attempts in the last {}", span(q)),
        Some(pct) => format!("{pct}% of {all} attempts succeeded in the last {}", span(q)),
    };
    let line = Line {
        points,
        ymax: 100.0,
        unit: "%",
        class: "",
        desc,
    };
    line_chart(id, "Success rate", q, buckets.len(), &line)
}

/// The mean duration of the successful attempts, per bucket with one.
pub(super) fn latency_chart(id: &str, q: &ActivityQuery, buckets: &[ActivityBucket]) -> String {
    let points: Vec<(usize, f64)> = buckets
        .iter()
        .enumerate()
        .filter_map(|(i, b)| b.latency_mean_ms().map(|m| (i, m as f64)))
        .collect();
    let max = buckets.iter().map(|b| b.latency_max_ms).max().unwrap_or(0);
    let ok: u64 = buckets.iter().map(|b| b.succeeded).sum();
    let total: u64 = buckets.iter().map(|b| b.latency_total_ms).sum();
    let ymax = nice(points.iter().map(|(_, v)| *v).fold(0.0, f64::max));
    let desc = match total.checked_div(ok) {
        None => format!("no successful attempts in the last {}", span(q)),
        Some(mean) => format!(
            "mean {mean} ms, slowest {max} ms over {ok} successful attempts in the last {}",
            span(q)
        ),
    };
    let line = Line {
        points,
        ymax,
        unit: " ms",
        class: "latency",
        desc,
    };
    line_chart(
        id,
        "Latency (mean of successful attempts)",
        q,
        buckets.len(),
        &line,
    )
}

fn span(q: &ActivityQuery) -> String {
    humantime(q.until.duration_since(q.since))
}

fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// The page a chart's range link goes to: `path?tenant=…`.
pub(super) fn here(path: &str, tenant: &TenantId) -> String {
    format!("{path}?tenant={}", enc(tenant.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> ActivityQuery {
        ActivityQuery {
            tenant: TenantId::new("acme").unwrap(),
            endpoint: None,
            since: Timestamp::from_unix_millis(0).unwrap(),
            until: Timestamp::from_unix_millis(180_000).unwrap(),
            bucket: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_outcome_chart_says_its_counts() {
        let q = q();
        let mut b = q.empty_buckets();
        b[0].succeeded = 3;
        b[2].failed = 1;
        b[2].dead = 2;
        let html = outcome_chart("a", "Activity", &q, &b);
        assert!(html.contains("aria-label=\"Activity: attempts per 1 min over the last 3 min; 3 succeeded, 1 failed, 2 dead\""), "{html}");
        assert!(html.contains("<title>00:00–00:01 UTC: 3 succeeded, 0 failed, 0 dead</title>"));
        assert_eq!(html.matches("<rect ").count(), 3);
        assert!(html.contains("<tr><td>00:02–00:03 UTC</td><td>0</td><td>1</td><td>2</td></tr>"));
    }

    #[test]
    fn rate_and_latency_summaries() {
        let q = q();
        let mut b = q.empty_buckets();
        b[0].succeeded = 3;
        b[0].failed = 1;
        b[0].latency_total_ms = 30;
        b[0].latency_max_ms = 20;
        assert!(success_rate_chart("r", &q, &b).contains("75% of 4 attempts succeeded"));
        assert!(latency_chart("l", &q, &b)
            .contains("mean 10 ms, slowest 20 ms over 3 successful attempts"));
        assert_eq!(nice(7.0), 10.0);
        assert_eq!(nice(23.0), 50.0);
        assert!(hours_of(&[("hours".into(), "5".into())]).is_err());
    }
}
