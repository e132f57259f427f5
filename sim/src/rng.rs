//! Seeded randomness in independent streams.
//!
//! Every random draw in a run comes from a ChaCha8 stream derived from the run's seed and a
//! label naming what the stream is for (`node/17`, `link/3/9`, `faults`, `workload`). Streams
//! never share state, so adding a fault draws from the fault stream only and leaves every
//! node's and link's draws exactly as they were. ChaCha8 is a fixed, portable algorithm:
//! the same seed gives the same draws on every machine and build.

use chacha20::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use sha2::{Digest, Sha256};

/// One independent stream of random numbers.
pub struct SimRng(ChaCha8Rng);

impl std::fmt::Debug for SimRng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimRng")
    }
}

impl SimRng {
    /// The stream `label` of run `seed`.
    #[must_use]
    pub fn stream(seed: u64, label: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"murmur-sim/rng/1\0");
        hasher.update(seed.to_le_bytes());
        hasher.update(label.as_bytes());
        Self(ChaCha8Rng::from_seed(hasher.finalize().into()))
    }

    /// A uniformly random `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform integer in `0..n` (`n > 0`), without modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        // Rejection sampling on the largest multiple of n.
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// A uniform float in `[0, 1)` with 53 bits of precision.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// A uniform integer in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo { lo } else { lo + self.below(hi - lo + 1) }
    }

    /// 32 random bytes (key seeds).
    pub fn bytes32(&mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        out
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_independent() {
        let a: Vec<u64> = (0..4).map(|_| SimRng::stream(7, "node/1").next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]), "same seed and label, same draws");
        let mut x = SimRng::stream(7, "node/1");
        let mut y = SimRng::stream(7, "node/2");
        let mut z = SimRng::stream(8, "node/1");
        let (x, y, z) = (x.next_u64(), y.next_u64(), z.next_u64());
        assert!(x != y && x != z);
    }

    #[test]
    fn the_algorithm_is_frozen() {
        // If this changes, every recorded trace hash changes: the stream derivation or the
        // generator changed, which must be deliberate.
        assert_eq!(SimRng::stream(1, "faults").next_u64(), FROZEN_FIRST_DRAW);
    }

    const FROZEN_FIRST_DRAW: u64 = 3_344_172_846_259_895_633;

    #[test]
    fn below_and_between_stay_in_range() {
        let mut rng = SimRng::stream(3, "t");
        for _ in 0..10_000 {
            assert!(rng.below(7) < 7);
            let v = rng.between(5, 9);
            assert!((5..=9).contains(&v));
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
