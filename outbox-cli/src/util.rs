//! Small parsers, the table renderer and the output helpers.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use comfy_table::{ContentArrangement, Table, TableComponent};
use outboxkit_core::Timestamp;

use crate::error::{CliError, CliResult};

/// The longest duration any flag accepts: 100 years.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Parse the value of `--flag`: `30d`, `12h`, `5m`, `10s`, `250ms`, `1h 30m` (humantime
/// units; a bare number is seconds), at most 100 years. The error names the flag.
pub fn parse_flag_duration(flag: &str, s: &str) -> CliResult<Duration> {
    parse_duration(s)
        .map_err(|e| CliError::usage(format!("invalid input: --{flag}: {}", e.message)))
}

/// Parse a duration (see [`parse_flag_duration`]).
pub fn parse_duration(s: &str) -> CliResult<Duration> {
    let s = s.trim();
    let bad = || {
        CliError::usage(format!(
            "{s:?} is not a duration: use a number with ms, s, m, h or d (e.g. 30d), at most 100 years"
        ))
    };
    let d = if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        Duration::from_secs(s.parse().map_err(|_| bad())?)
    } else {
        // humantime also accepts years and months, whose length is ambiguous: refuse them.
        let ambiguous = s
            .split(|c: char| !c.is_ascii_alphabetic())
            .any(|unit| matches!(unit, "y" | "year" | "years" | "M" | "month" | "months"));
        // Whole numbers only: `1.5h` is refused, as it always was.
        if ambiguous || s.contains('.') {
            return Err(bad());
        }
        humantime::parse_duration(s).map_err(|_| bad())?
    };
    if d > MAX_DURATION {
        return Err(bad());
    }
    Ok(d)
}

/// Parse a point in time for `--flag`: an RFC 3339 time (`2026-11-30T10:00:00Z`) or a
/// duration meaning that long before `now` (`2h`).
pub fn parse_flag_time(flag: &str, s: &str, now: Timestamp) -> CliResult<Timestamp> {
    if s.contains('T') || (s.contains('-') && s.len() >= 10) {
        let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|_| {
            CliError::usage(format!(
                "invalid input: --{flag}: {s:?} is not a time: use RFC 3339 (2026-11-30T10:00:00Z) or a duration ago (2h)"
            ))
        })?;
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .ok_or_else(|| CliError::usage(format!("invalid input: --{flag}: out of range")))?;
        return Timestamp::from_unix_millis(ms)
            .map_err(|_| CliError::usage(format!("invalid input: --{flag}: out of range")));
    }
    Ok(now.saturating_sub(parse_flag_duration(flag, s)?))
}

/// Render rows as a table with a header, fitted to the terminal's width when stdout is a
/// terminal (never wrapped when piped). Rows may have more or fewer cells than the header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::NOTHING)
        .set_style(TableComponent::HeaderLines, '-')
        .set_style(TableComponent::MiddleHeaderIntersections, ' ')
        .set_style(TableComponent::VerticalLines, ' ');
    if std::io::stdout().is_terminal() {
        t.set_content_arrangement(ContentArrangement::Dynamic);
    } else {
        t.force_no_tty()
            .set_content_arrangement(ContentArrangement::Disabled);
    }
    t.set_header(header.to_vec());
    for row in rows {
        t.add_row(row.clone());
    }
    for c in t.column_iter_mut() {
        c.set_padding((0, 1));
    }
    let mut out = String::new();
    for line in t.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Write `text` to stdout. A closed pipe (`outbox … | head -1`) ends the command quietly
/// with exit code 0; another write failure is an error.
pub fn emit(text: &str) -> CliResult<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(CliError::quiet()),
        Err(e) => Err(CliError::failed(format!("cannot write the output: {e}"))),
    }
}

/// Write one JSON document (pretty, newline-terminated) to stdout.
pub fn emit_json(value: &serde_json::Value) -> CliResult<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::failed(format!("cannot render json: {e}")))?;
    emit(&(text + "\n"))
}

/// `println!` to stdout through [`emit`]: `outln!(…)` returns early from the calling
/// function (which returns a `CliResult`) on a closed pipe.
#[macro_export]
macro_rules! outln {
    () => { $crate::util::emit("\n")? };
    ($($t:tt)*) => { $crate::util::emit(&format!("{}\n", format_args!($($t)*)))? };
}

/// `print!` to stdout through [`emit`].
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::util::emit(&format!($($t)*))? };
}

/// A progress bar on stderr for `len` steps, drawn only when stderr is a terminal and the
/// output is not JSON (it never mixes with `--json` or piped output).
pub fn progress(len: u64, json: bool, what: &str) -> indicatif::ProgressBar {
    if json || len < 2 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} {wide_bar} {pos}/{len} ({eta})")
    {
        bar.set_style(style);
    }
    bar.set_message(what.to_owned());
    bar
}

/// A spinner on stderr for an operation of unknown length, drawn only on a terminal and
/// never with `--json`.
pub fn spinner(json: bool, what: &str) -> indicatif::ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("30d").unwrap(),
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(parse_duration("12h").unwrap(), Duration::from_secs(43_200));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(
            parse_duration("1h 30m").unwrap(),
            Duration::from_secs(5_400)
        );
        for bad in [
            "",
            "-1d",
            "1y",
            "2months",
            "d",
            "99999999999999999999d",
            "1.5h",
        ] {
            assert_eq!(parse_duration(bad).unwrap_err().code, 2, "{bad}");
        }
    }

    #[test]
    fn every_unit_respects_the_cap() {
        for bad in [
            "99999999999999999ms",
            "3153600001s",
            "52560001m",
            "876001h",
            "36501d",
            "3153600001",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert_eq!(e.code, 2, "{bad}");
            assert!(e.message.contains("100 years"), "{bad}: {}", e.message);
        }
        assert_eq!(parse_duration("36500d").unwrap(), MAX_DURATION);
    }

    #[test]
    fn flag_errors_name_the_flag() {
        let e = parse_flag_duration("older-than", "-1d").unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.message.contains("--older-than"), "{}", e.message);
        assert!(e.message.contains("duration"), "{}", e.message);
    }

    #[test]
    fn times_are_rfc3339_or_ago() {
        let now = Timestamp::from_unix_millis(1_800_000_000_000).unwrap();
        assert_eq!(
            parse_flag_time("since", "2h", now).unwrap(),
            now.saturating_sub(Duration::from_secs(7_200))
        );
        assert_eq!(
            parse_flag_time("since", "2027-01-15T08:00:00Z", now)
                .unwrap()
                .to_rfc3339(),
            "2027-01-15T08:00:00.000Z"
        );
        let e = parse_flag_time("until", "2027-13-45T00:00:00Z", now).unwrap_err();
        assert!(e.message.contains("--until"), "{}", e.message);
    }

    #[test]
    fn tables_align() {
        let t = table(&["a", "bb"], &[vec!["xxx".into(), "y".into()]]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[1].starts_with("---"), "{t}");
        let col = |l: &str, w: &str| l.find(w).unwrap();
        assert_eq!(col(lines[0], "bb"), col(lines[2], "y"), "{t}");
    }

    #[test]
    fn a_row_longer_than_the_header_cannot_panic() {
        let t = table(
            &["a"],
            &[
                vec!["1".into(), "extra".into(), "more".into()],
                vec![],
                vec!["2".into()],
            ],
        );
        assert!(t.contains("extra") && t.contains("more"), "{t}");
    }
}
