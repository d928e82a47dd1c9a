//! Time and randomness as injected capabilities: [`Timestamp`], [`Clock`] and [`Entropy`].
//!
//! Nothing in the library reads the system clock or OS randomness except
//! [`crate::system`]; everything else receives a `Clock` and an `Entropy`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A point in time: whole milliseconds since the Unix epoch, UTC, between
/// 1970-01-01 and 9999-12-31.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// 1970-01-01T00:00:00Z.
    pub const EPOCH: Timestamp = Timestamp(0);
    /// 9999-12-31T23:59:59.999Z, the latest representable instant.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);

    /// From milliseconds since the epoch; out-of-range values are refused.
    pub fn from_unix_millis(millis: i64) -> Result<Self> {
        if (0..=Self::MAX.0).contains(&millis) {
            Ok(Timestamp(millis))
        } else {
            Err(Error::invalid_input(
                "timestamp",
                "outside 1970-01-01..9999-12-31",
            ))
        }
    }

    /// From milliseconds since the epoch, clamped into range.
    pub fn from_unix_millis_clamped(millis: i64) -> Self {
        Timestamp(millis.clamp(0, Self::MAX.0))
    }

    /// Milliseconds since the epoch.
    pub fn as_unix_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the epoch (the `webhook-timestamp` value).
    pub fn as_unix_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// `self + d`, clamped at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(ms).min(Self::MAX.0))
    }

    /// `self - d`, clamped at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(ms).max(0))
    }

    /// The time from `earlier` to `self`, zero when `earlier` is later.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0 - earlier.0).unwrap_or(0))
    }

    /// RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T10:00:00.000Z`.
    pub fn to_rfc3339(self) -> String {
        let b = self.rfc3339_bytes();
        // ASCII digits and separators only.
        String::from_utf8_lossy(&b).into_owned()
    }

    /// [`Timestamp::to_rfc3339`]'s 24 ASCII bytes, written without the formatting
    /// machinery or an allocation (a timestamp's year is always four digits: 1970–9999).
    pub fn rfc3339_bytes(self) -> [u8; 24] {
        let secs = self.0.div_euclid(1000);
        let ms = self.0.rem_euclid(1000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut v: i64| {
            for i in (at..at + width).rev() {
                // `v % 10` is a single digit.
                out[i] = b'0' + v.rem_euclid(10) as u8;
                v /= 10;
            }
        };
        put(0, 4, y);
        put(5, 2, i64::from(m));
        put(8, 2, i64::from(d));
        put(11, 2, sod / 3600);
        put(14, 2, (sod / 60) % 60);
        put(17, 2, sod % 60);
        put(20, 3, ms);
        out
    }

    /// Parse an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, and the obsolete forms).
    pub fn parse_http_date(s: &str) -> Option<Timestamp> {
        let t = httpdate::parse_http_date(s.trim()).ok()?;
        // SystemTime arithmetic only, no clock read.
        let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
        Timestamp::from_unix_millis(i64::try_from(d.as_millis()).ok()?).ok()
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_rfc3339())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// The source of the current time.
///
/// Sleeping is not part of the core contract (the core performs no I/O and owns no timer):
/// the dispatcher's `Timer` extends this trait with `sleep_until`.
///
/// # Contract
/// - `now()` MUST never go backwards within one clock.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// A shared [`Clock`].
pub type DynClock = dyn Clock;

impl<T: Clock + ?Sized> Clock for std::sync::Arc<T> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<T: Clock + ?Sized> Clock for Box<T> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// A source of random bytes: claim tokens, ids, jitter samples and nonces.
pub trait Entropy: Send + Sync + fmt::Debug + 'static {
    /// Fill `buf` with random bytes.
    fn fill(&self, buf: &mut [u8]);
}

impl<T: Entropy + ?Sized> Entropy for std::sync::Arc<T> {
    fn fill(&self, buf: &mut [u8]) {
        (**self).fill(buf)
    }
}

impl<T: Entropy + ?Sized> Entropy for Box<T> {
    fn fill(&self, buf: &mut [u8]) {
        (**self).fill(buf)
    }
}

/// A shared [`Entropy`].
pub type DynEntropy = dyn Entropy;

/// Conveniences over any [`Entropy`].
pub trait EntropyExt: Entropy {
    /// A uniformly random `u64`.
    fn next_u64(&self) -> u64 {
        let mut b = [0u8; 8];
        self.fill(&mut b);
        u64::from_le_bytes(b)
    }

    /// A uniform sample in `[0, 1)`, the jitter argument of [`crate::RetryPolicy::delay`].
    fn unit_sample(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl<T: Entropy + ?Sized> EntropyExt for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_614_265_330_123, "2021-02-25T15:02:10.123Z"),
            (Timestamp::MAX.0, "9999-12-31T23:59:59.999Z"),
        ];
        for (ms, want) in cases {
            assert_eq!(Timestamp::from_unix_millis(ms).unwrap().to_rfc3339(), want);
        }
    }

    #[test]
    fn rfc3339_bytes_are_the_formatted_text() {
        // The text as `format!` writes it, over instants spread across the whole range.
        let formatted = |t: Timestamp| {
            let secs = t.0.div_euclid(1000);
            let sod = secs.rem_euclid(86_400);
            let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
                sod / 3600,
                (sod / 60) % 60,
                sod % 60,
                t.0.rem_euclid(1000)
            )
        };
        let step = Timestamp::MAX.0 / 9_973;
        for ms in (0..=Timestamp::MAX.0)
            .step_by(step as usize)
            .chain([Timestamp::MAX.0])
        {
            let t = Timestamp(ms);
            assert_eq!(t.rfc3339_bytes(), formatted(t).as_bytes(), "{ms}");
            assert_eq!(t.to_rfc3339(), formatted(t));
        }
    }

    #[test]
    fn out_of_range_timestamps_are_refused() {
        assert!(Timestamp::from_unix_millis(-1).is_err());
        assert!(Timestamp::from_unix_millis(Timestamp::MAX.0 + 1).is_err());
        assert_eq!(
            Timestamp::MAX.saturating_add(Duration::from_secs(10)),
            Timestamp::MAX
        );
        assert_eq!(
            Timestamp::EPOCH.saturating_sub(Duration::from_secs(10)),
            Timestamp::EPOCH
        );
    }

    #[test]
    fn http_dates_parse() {
        let t = Timestamp::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(t.as_unix_seconds(), 784_111_777);
        assert!(Timestamp::parse_http_date("yesterday").is_none());
    }
}
