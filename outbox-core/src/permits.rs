//! Rate-limit permits shared by every dispatcher through the store: the rule each store
//! applies to its record of an endpoint's recent starts, as pure arithmetic.
//!
//! An endpoint's limit is "`rate` starts per second", sliding: each start holds its permit
//! for one second from when it was granted, so no half-open one-second window holds more
//! than `rate` grants, whichever processes asked. A store keeps, per tenant and endpoint,
//! the grants of the last second as `(time in ms, count)` runs ([`PermitLog`]): at most one
//! run per millisecond of the window, so at most 1,000 runs whatever the rate.

use std::time::Duration;

use crate::endpoint::MAX_RATE_LIMIT;
use crate::error::{Error, ErrorKind, Result};
use crate::time::Timestamp;

/// How long a granted permit is held: the window a rate limit counts in.
pub const PERMIT_WINDOW: Duration = Duration::from_secs(1);

const WINDOW_MS: i64 = 1_000;

/// What a [`crate::DeliveryStore::take_permits`] call granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permits {
    /// How many starts may go now (at most the number asked for).
    pub granted: u32,
    /// When the next permit frees: the call's `now` while some are still free, else when
    /// the oldest grant of the window turns one second old.
    pub next_at: Timestamp,
}

impl Permits {
    /// How long after `now` the next permit frees (zero when one is free now).
    pub fn wait(&self, now: Timestamp) -> Duration {
        self.next_at.duration_since(now)
    }
}

/// Check a permit request's rate: 1 to [`MAX_RATE_LIMIT`] per second.
pub fn validate_rate(rate: u32) -> Result<()> {
    if (1..=MAX_RATE_LIMIT).contains(&rate) {
        Ok(())
    } else {
        Err(Error::invalid_input(
            "rate",
            format!("must be from 1 to {MAX_RATE_LIMIT} per second"),
        ))
    }
}

/// One endpoint's grants of the last second, oldest first: `(unix ms, count)` runs with
/// strictly increasing times.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermitLog {
    runs: Vec<(i64, u32)>,
}

impl PermitLog {
    /// The runs, oldest first.
    pub fn runs(&self) -> &[(i64, u32)] {
        &self.runs
    }

    /// A log from stored runs (any order; runs of one time are merged).
    pub fn from_runs(mut runs: Vec<(i64, u32)>) -> Self {
        runs.sort_unstable_by_key(|r| r.0);
        let mut out: Vec<(i64, u32)> = Vec::with_capacity(runs.len());
        for (t, c) in runs {
            match out.last_mut() {
                Some(last) if last.0 == t => last.1 = last.1.saturating_add(c),
                _ => out.push((t, c)),
            }
        }
        Self { runs: out }
    }

    /// The log as stored bytes: 12 per run (big-endian ms, then count).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.runs.len() * 12);
        for (t, c) in &self.runs {
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&c.to_be_bytes());
        }
        out
    }

    /// A log read back from [`PermitLog::to_bytes`]; a length that is not a whole number of
    /// runs is corrupt.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if !bytes.len().is_multiple_of(12) {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a rate-limit permit log has a partial run",
            ));
        }
        let runs = bytes
            .chunks_exact(12)
            .map(|r| {
                let mut t = [0; 8];
                let mut c = [0; 4];
                t.copy_from_slice(&r[..8]);
                c.copy_from_slice(&r[8..]);
                (i64::from_be_bytes(t), u32::from_be_bytes(c))
            })
            .collect();
        Ok(Self::from_runs(runs))
    }

    /// Take up to `want` permits at `now` under `rate` per second: forget grants at least a
    /// second old, grant what the rest leaves free, and record the grant at `now` (or at the
    /// newest recorded time, if another process's clock ran ahead: a later record frees
    /// later, never sooner). Returns what was granted and when the next permit frees.
    pub fn take(&mut self, rate: u32, want: u32, now: Timestamp) -> Permits {
        let now_ms = now.as_unix_millis();
        self.runs
            .retain(|(t, _)| t.saturating_add(WINDOW_MS) > now_ms);
        let used: u64 = self.runs.iter().map(|r| u64::from(r.1)).sum();
        let free = u64::from(rate).saturating_sub(used);
        let granted = u32::try_from(free.min(u64::from(want))).unwrap_or(0);
        if granted > 0 {
            match self.runs.last_mut() {
                Some(last) if last.0 >= now_ms => last.1 = last.1.saturating_add(granted),
                _ => self.runs.push((now_ms, granted)),
            }
        }
        let next_at = if used + u64::from(granted) < u64::from(rate) {
            now
        } else {
            self.oldest_expiry().unwrap_or(now).max(now)
        };
        Permits { granted, next_at }
    }

    /// When the log's oldest grant turns a second old (`None` when empty): a store may drop
    /// the whole log once the newest has.
    pub fn oldest_expiry(&self) -> Option<Timestamp> {
        self.runs
            .first()
            .map(|(t, _)| Timestamp::from_unix_millis_clamped(t.saturating_add(WINDOW_MS)))
    }

    /// Whether nothing is recorded (a store may delete the row).
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: i64) -> Timestamp {
        Timestamp::from_unix_millis(1_700_000_000_000 + n).unwrap()
    }

    #[test]
    fn permits_come_back_one_second_after_they_were_granted() {
        let mut log = PermitLog::default();
        // (time, want, granted, next free at)
        let rows = [
            (0, 2, 2, 0),
            (0, 1, 1, 1000),
            (0, 1, 0, 1000),
            (400, 3, 0, 1000),
            (1000, 2, 2, 1000),
            (1000, 1, 1, 2000),
            (1500, 1, 0, 2000),
            (2000, 0, 0, 2000),
            (2000, 4, 3, 3000),
        ];
        for (t, want, granted, next) in rows {
            let got = log.take(3, want, ms(t));
            assert_eq!(
                got,
                Permits {
                    granted,
                    next_at: ms(next)
                },
                "at {t} ms"
            );
        }
        assert_eq!(log.runs().len(), 1, "one run per millisecond");
    }

    #[test]
    fn a_clock_behind_the_log_records_at_the_newest_time() {
        let mut log = PermitLog::default();
        assert_eq!(log.take(2, 1, ms(500)).granted, 1);
        assert_eq!(log.take(2, 1, ms(100)).granted, 1);
        assert_eq!(log.runs(), &[(ms(500).as_unix_millis(), 2)]);
        assert_eq!(log.take(2, 1, ms(1400)).granted, 0);
        assert_eq!(log.take(2, 2, ms(1500)).granted, 2);
    }

    #[test]
    fn bytes_round_trip_and_partial_runs_are_corrupt() {
        let log = PermitLog::from_runs(vec![(5, 1), (3, 2), (5, 4)]);
        assert_eq!(log.runs(), &[(3, 2), (5, 5)]);
        assert_eq!(PermitLog::from_bytes(&log.to_bytes()).unwrap(), log);
        assert!(PermitLog::from_bytes(&[0; 13]).is_err());
        assert!(validate_rate(0).is_err());
        assert!(validate_rate(MAX_RATE_LIMIT + 1).is_err());
        assert!(validate_rate(1).is_ok());
    }
}
