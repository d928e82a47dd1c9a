//! The real clock and the operating system's randomness: the only module that may read
//! either (`clippy.toml` bans the calls everywhere else).
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::time::{Clock, Entropy, Timestamp};

/// The wall clock. The dispatcher crate's `Timer` gives it a `tokio::time` sleep.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp::from_unix_millis_clamped(ms)
    }
}

/// Randomness from the operating system (`getrandom`).
#[derive(Clone, Copy, Debug, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) {
        if let Err(e) = getrandom::fill(buf) {
            // The OS random source failing is unrecoverable; continuing with predictable
            // tokens or secrets would be worse than stopping.
            panic!("the operating system's random source failed: {e}");
        }
    }
}

/// A monotonic stopwatch for measuring durations (benchmarks, attempt timings).
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Start measuring now.
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    /// Time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now().as_unix_seconds() > 1_700_000_000);
    }

    #[test]
    fn os_entropy_fills() {
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        OsEntropy.fill(&mut a);
        OsEntropy.fill(&mut b);
        assert_ne!(a, b);
    }
}
