//! Times on the console's pages: relative ("3 min ago"), with the exact UTC time in a
//! `<time datetime>` and its `title` (shown on hover).

use outboxkit_core::Timestamp;

use crate::html::esc;

/// `at` relative to `now`: `just now`, `42 s ago`, `3 min ago`, `5 h ago`, `2 d ago`, or
/// `in 3 min` for a time to come.
pub(crate) fn ago(now: Timestamp, at: Timestamp) -> String {
    let (d, future) = if at > now {
        (at.duration_since(now), true)
    } else {
        (now.duration_since(at), false)
    };
    let s = d.as_secs();
    let text = match s {
        0..=4 => return "just now".to_owned(),
        5..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// `2026-12-04 18:30:03 UTC`.
pub(crate) fn exact(at: Timestamp) -> String {
    let r = at.to_rfc3339();
    format!("{} {} UTC", &r[..10], &r[11..19])
}

/// A `<time>` element: relative text, the exact time on hover.
pub(crate) fn when(now: Timestamp, at: Timestamp) -> String {
    format!(
        "<time datetime=\"{}\" title=\"{}\">{}</time>",
        esc(&at.to_rfc3339()),
        esc(&exact(at)),
        esc(&ago(now, at))
    )
}

/// [`when`] of an optional time, or a dash.
pub(crate) fn when_opt(now: Timestamp, at: Option<Timestamp>) -> String {
    at.map_or_else(|| "—".to_owned(), |t| when(now, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_unix_millis(s * 1000).unwrap()
    }

    #[test]
    fn relative_times() {
        let now = ts(1_000_000);
        for (at, text) in [
            (1_000_000, "just now"),
            (999_958, "42 s ago"),
            (1_000_000 - 3 * 60 - 5, "3 min ago"),
            (1_000_000 - 5 * 3600, "5 h ago"),
            (1_000_000 - 2 * 86_400 - 7, "2 d ago"),
            (1_000_000 + 180, "in 3 min"),
        ] {
            assert_eq!(ago(now, ts(at)), text);
        }
    }

    #[test]
    fn the_exact_time_is_on_hover() {
        let at = Timestamp::from_unix_millis(1_764_872_403_000).unwrap();
        assert_eq!(exact(at), "2025-12-04 18:20:03 UTC");
        let html = when(at.saturating_add(std::time::Duration::from_secs(120)), at);
        assert!(
            html.starts_with("<time datetime=\"2025-12-04T18:20:03"),
            "{html}"
        );
        assert!(html.contains("title=\"2025-12-04 18:20:03 UTC\">2 min ago</time>"));
    }
}
