//! A clock you move by hand, and a seeded random source: deterministic tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{Clock, Entropy, Timestamp};
use outboxkit_dispatch::Timer;
use tokio::sync::watch;

/// A [`Clock`] that only moves when told. Sleepers wake as soon as the clock is set or
/// advanced past their deadline, so dispatcher timers follow it.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
    tick: watch::Sender<i64>,
}

impl ManualClock {
    /// 2026-01-01T00:00:00Z: the start of every test.
    pub const START: i64 = 1_767_225_600_000;

    /// A clock at [`ManualClock::START`].
    pub fn new() -> Arc<Self> {
        Self::at(Timestamp::from_unix_millis_clamped(Self::START))
    }

    /// A clock at `t`.
    pub fn at(t: Timestamp) -> Arc<Self> {
        Arc::new(ManualClock {
            now: Mutex::new(t),
            tick: watch::channel(t.as_unix_millis()).0,
        })
    }

    /// Move to `t` (never backwards: an earlier `t` is ignored).
    pub fn set(&self, t: Timestamp) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        if t > *now {
            *now = t;
            self.tick.send_replace(t.as_unix_millis());
        }
    }

    /// Move forward by `d`.
    pub fn advance(&self, d: Duration) {
        let t = self.now().saturating_add(d);
        self.set(t);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Timer for ManualClock {
    async fn sleep_until(&self, deadline: Timestamp) {
        let mut rx = self.tick.subscribe();
        loop {
            if self.now() >= deadline {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// A deterministic [`Entropy`] (SplitMix64) for reproducible tokens, ids and jitter.
#[derive(Debug)]
pub struct SeededEntropy(AtomicU64);

impl SeededEntropy {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Arc<Self> {
        Arc::new(SeededEntropy(AtomicU64::new(seed)))
    }

    fn next(&self) -> u64 {
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboxkit_dispatch::TimerExt;

    #[tokio::test]
    async fn sleepers_follow_the_manual_clock() {
        let clock = ManualClock::new();
        let c2 = clock.clone();
        let sleeper = tokio::spawn(async move { c2.sleep(Duration::from_secs(60)).await });
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(30));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(30));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .unwrap()
            .unwrap();
    }

    #[test]
    fn seeded_entropy_is_reproducible() {
        let (a, b) = (SeededEntropy::new(7), SeededEntropy::new(7));
        let (mut x, mut y) = ([0u8; 13], [0u8; 13]);
        a.fill(&mut x);
        b.fill(&mut y);
        assert_eq!(x, y);
        a.fill(&mut x);
        assert_ne!(x, y);
    }
}
