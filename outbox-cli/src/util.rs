//! Small parsers and a plain-text table printer.

use std::time::Duration;

use crate::error::{CliError, CliResult};

/// Parse the value of `--flag`: `30d`, `12h`, `5m`, `10s`, `250ms` (a bare number is
/// seconds). The error names the flag.
pub fn parse_flag_duration(flag: &str, s: &str) -> CliResult<Duration> {
    parse_duration(s)
        .map_err(|e| CliError::usage(format!("invalid input: --{flag}: {}", e.message)))
}

/// Parse `30d`, `12h`, `5m`, `10s`, `250ms` (a bare number is seconds).
pub fn parse_duration(s: &str) -> CliResult<Duration> {
    let s = s.trim();
    let bad = || {
        CliError::usage(format!(
            "{s:?} is not a duration: use a number with ms, s, m, h or d (e.g. 30d)"
        ))
    };
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "" | "s" => n,
        "m" => n.checked_mul(60).ok_or_else(bad)?,
        "h" => n.checked_mul(3600).ok_or_else(bad)?,
        "d" => n.checked_mul(86_400).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if secs > 100 * 365 * 86_400 {
        return Err(bad());
    }
    Ok(Duration::from_secs(secs))
}

/// Print rows as an aligned table with a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(c);
            if i + 1 < cells.len() {
                out.push_str(&" ".repeat(widths[i].saturating_sub(c.chars().count())));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    out.push_str(&line(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
    ));
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
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
        for bad in ["", "-1d", "1y", "d", "99999999999999999999d", "1.5h"] {
            assert_eq!(parse_duration(bad).unwrap_err().code, 2, "{bad}");
        }
    }

    #[test]
    fn flag_errors_name_the_flag() {
        let e = parse_flag_duration("older-than", "-1d").unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.message.contains("--older-than"), "{}", e.message);
    }

    #[test]
    fn tables_align() {
        let t = table(&["a", "bb"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "a    bb\n---  --\nxxx  y\n");
    }
}
