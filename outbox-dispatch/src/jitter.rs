//! Jitter samples for retry delays, drawn from the injected entropy in blocks.
//!
//! Every attempt takes one sample (core's `AttemptContext::jitter`), used only when the
//! attempt is retried. Drawing 8 bytes per attempt made every delivery pay a `getrandom`
//! system call (about 5 % of the dispatcher's CPU in a PostgreSQL drain, by `perf`); the
//! samples are now drawn [`BLOCK`] at a time, in the order the entropy gives them, so a
//! seeded entropy yields the same sequence of samples as before.

use std::sync::{Arc, Mutex, PoisonError};

use outboxkit_core::DynEntropy;

/// Samples drawn per read of the entropy.
const BLOCK: usize = 64;

pub(crate) struct Samples {
    entropy: Arc<DynEntropy>,
    /// The block and the index of its next unused sample (`BLOCK`: none left).
    drawn: Mutex<([u64; BLOCK], usize)>,
}

impl Samples {
    pub(crate) fn new(entropy: Arc<DynEntropy>) -> Self {
        Samples {
            entropy,
            drawn: Mutex::new(([0; BLOCK], BLOCK)),
        }
    }

    /// A uniform sample in `[0, 1)` (as core's `EntropyExt::unit_sample`).
    pub(crate) fn next(&self) -> f64 {
        let mut d = self.drawn.lock().unwrap_or_else(PoisonError::into_inner);
        if d.1 == BLOCK {
            let mut bytes = [0u8; BLOCK * 8];
            self.entropy.fill(&mut bytes);
            for (v, b) in d.0.iter_mut().zip(bytes.chunks_exact(8)) {
                *v = u64::from_le_bytes(b.try_into().unwrap_or_default());
            }
            d.1 = 0;
        }
        let v = d.0[d.1];
        d.1 += 1;
        (v >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboxkit_core::{Entropy, EntropyExt};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A counter stream: byte `i` of the stream is `i as u8`.
    #[derive(Debug, Default)]
    struct Stream(AtomicU64);

    impl Entropy for Stream {
        fn fill(&self, buf: &mut [u8]) {
            for b in buf {
                *b = self.0.fetch_add(1, Ordering::Relaxed) as u8;
            }
        }
    }

    #[test]
    fn samples_follow_the_entropy_stream_across_blocks() {
        let one_by_one = Stream::default();
        let samples = Samples::new(Arc::new(Stream::default()));
        for _ in 0..(BLOCK * 2 + 3) {
            let want = one_by_one.unit_sample();
            let got = samples.next();
            assert_eq!(got.to_bits(), want.to_bits());
            assert!((0.0..1.0).contains(&got));
        }
    }
}
