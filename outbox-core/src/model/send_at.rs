//! When a message asks to be sent, as the front doors take it: the CLI's `--delay 10m` /
//! `--at 2026-12-24T00:00:00Z` and the API's `delay` / `available_at`.
//!
//! Stricter than [`NewMessage::available_at`] (where a past time means now, for programs
//! that compute a time): a person or a remote caller naming a time in the past has made a
//! mistake, so it is refused, allowing [`SEND_AT_SKEW`] for clocks that disagree a little.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::model::{Limits, NewMessage};
use crate::time::Timestamp;

/// How far in the past an explicit send time may be and still mean "now": the clock skew
/// allowed between the caller and the store. One minute.
pub const SEND_AT_SKEW: Duration = Duration::from_secs(60);

/// A requested send time: now, after a delay, or at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SendAt {
    /// As soon as possible.
    #[default]
    Now,
    /// No earlier than this long after the enqueue.
    After(Duration),
    /// No earlier than this time.
    At(Timestamp),
}

impl SendAt {
    /// From the two optional inputs; both given is `InvalidInput` (`field` names them, e.g.
    /// `"delay"`).
    pub fn from_parts(
        field: &'static str,
        delay: Option<Duration>,
        at: Option<Timestamp>,
    ) -> Result<SendAt> {
        match (delay, at) {
            (Some(_), Some(_)) => Err(Error::invalid_input(
                field,
                "give a delay or a time to send at, not both",
            )),
            (Some(d), None) => Ok(SendAt::After(d)),
            (None, Some(t)) => Ok(SendAt::At(t)),
            (None, None) => Ok(SendAt::Now),
        }
    }

    /// Check against the store's [`Limits::max_delay`] and `now`: a delay or time beyond the
    /// maximum delay, or a time more than [`SEND_AT_SKEW`] in the past, is `InvalidInput`
    /// naming `delay_field` or `at_field`.
    pub fn check(
        &self,
        limits: &Limits,
        now: Timestamp,
        delay_field: &'static str,
        at_field: &'static str,
    ) -> Result<()> {
        let days = limits.max_delay.as_secs() / 86_400;
        match *self {
            SendAt::Now => Ok(()),
            SendAt::After(d) if d > limits.max_delay => Err(Error::invalid_input(
                delay_field,
                format!("is longer than the maximum delay ({days} days)"),
            )),
            SendAt::After(_) => Ok(()),
            SendAt::At(t) if t < now.saturating_sub(SEND_AT_SKEW) => Err(Error::invalid_input(
                at_field,
                format!("{t} is in the past"),
            )),
            SendAt::At(t) if t > now.saturating_add(limits.max_delay) => Err(Error::invalid_input(
                at_field,
                format!("{t} is further ahead than the maximum delay ({days} days)"),
            )),
            SendAt::At(_) => Ok(()),
        }
    }

    /// `message` with this send time.
    pub fn apply(self, message: NewMessage) -> NewMessage {
        match self {
            SendAt::Now => message,
            SendAt::After(d) => message.delay(d),
            SendAt::At(t) => message.available_at(t),
        }
    }
}

/// Parse a delay: whole numbers with a unit, `ms`, `s`, `m`, `h` or `d`, one or more
/// (`10m`, `1h30m`, `1h 30m`, `500ms`); a bare number is seconds. A negative, fractional,
/// empty or otherwise unparsable text is `InvalidInput` naming `field`.
pub fn parse_delay(field: &'static str, text: &str) -> Result<Duration> {
    let s = text.trim();
    if s.starts_with('-') {
        return Err(Error::invalid_input(field, "a delay cannot be negative"));
    }
    let bad = || {
        Error::invalid_input(
            field,
            format!("{text:?} is not a delay: use a whole number with ms, s, m, h or d (e.g. 10m, 1h30m)"),
        )
    };
    if s.is_empty() {
        return Err(bad());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().map(Duration::from_secs).map_err(|_| bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        rest = rest.trim_start();
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let ms_per = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let ms = n.checked_mul(ms_per).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_millis(ms))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_unix_millis(ms).expect("a valid time")
    }

    #[test]
    fn delays_parse_with_units() {
        let ok = [
            ("10m", 600_000),
            ("90", 90_000),
            ("1h30m", 5_400_000),
            ("1h 30m", 5_400_000),
            ("500ms", 500),
            ("2d", 172_800_000),
            (" 5s ", 5_000),
            ("0s", 0),
        ];
        for (text, ms) in ok {
            assert_eq!(
                parse_delay("delay", text).expect(text),
                Duration::from_millis(ms),
                "{text}"
            );
        }
        for text in [
            "",
            "-5m",
            "1.5h",
            "10x",
            "m",
            "10 m x",
            "1y",
            "99999999999999999999d",
        ] {
            let e = parse_delay("delay", text).expect_err(text);
            assert_eq!(
                (e.kind(), e.field()),
                (crate::ErrorKind::InvalidInput, Some("delay")),
                "{text}"
            );
        }
        assert!(parse_delay("delay", "-5m")
            .expect_err("negative")
            .to_string()
            .contains("negative"));
    }

    #[test]
    fn both_a_delay_and_a_time_are_refused() {
        let e = SendAt::from_parts("delay", Some(Duration::from_secs(1)), Some(t(0)))
            .expect_err("both");
        assert_eq!(e.field(), Some("delay"));
        assert_eq!(
            SendAt::from_parts("delay", None, None).expect("neither"),
            SendAt::Now
        );
    }

    #[test]
    fn check_bounds_the_time_both_ways() {
        let limits = Limits::default();
        let now = t(1_800_000_000_000);
        let check = |s: SendAt| s.check(&limits, now, "delay", "at").map_err(|e| e.field());
        assert_eq!(check(SendAt::Now), Ok(()));
        assert_eq!(check(SendAt::After(limits.max_delay)), Ok(()));
        assert_eq!(
            check(SendAt::After(limits.max_delay + Duration::from_millis(1))),
            Err(Some("delay"))
        );
        assert_eq!(check(SendAt::At(now.saturating_sub(SEND_AT_SKEW))), Ok(()));
        assert_eq!(
            check(SendAt::At(
                now.saturating_sub(SEND_AT_SKEW + Duration::from_millis(1))
            )),
            Err(Some("at"))
        );
        assert_eq!(
            check(SendAt::At(now.saturating_add(limits.max_delay))),
            Ok(())
        );
        assert_eq!(
            check(SendAt::At(
                now.saturating_add(limits.max_delay + Duration::from_millis(1))
            )),
            Err(Some("at"))
        );
    }
}
