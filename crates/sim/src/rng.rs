//! Seeded randomness, split per component.
//!
//! A run has one master seed. Each component (a link, a host's NIC, a test source ...) gets its
//! own ChaCha8 stream whose seed is derived from the master seed and a stable component name,
//! so adding a component or drawing more numbers in one never changes the numbers another sees.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Derive a component seed from the master seed and a stable component id (a name such as
/// `"link/fwd"` or `"host/3/nic"`). FNV-1a over the name, mixed with the master seed by
/// SplitMix64's finaliser: cheap, stable across versions and platforms.
pub fn derive_seed(master: u64, component: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in component.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    splitmix64(master ^ splitmix64(h))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One component's random stream.
#[derive(Clone, Debug)]
pub struct SimRng {
    inner: ChaCha8Rng,
}

impl SimRng {
    /// The stream for `component` under `master`.
    pub fn new(master: u64, component: &str) -> SimRng {
        SimRng {
            inner: ChaCha8Rng::seed_from_u64(derive_seed(master, component)),
        }
    }
    /// A uniformly random `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }
    /// A uniform float in `[0, 1)` (53 random bits).
    pub fn uniform(&mut self) -> f64 {
        (self.inner.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// True with probability `p` (clamped to `[0, 1]`). Draws nothing when `p <= 0`, so a
    /// component with an impairment switched off consumes no randomness.
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.uniform() < p
    }
    /// A uniform integer in `[0, n)`; `n == 0` gives 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Multiply-shift (Lemire) without rejection: bias < n / 2^64, irrelevant here.
        ((u128::from(self.inner.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_independent_and_stable() {
        let mut a1 = SimRng::new(7, "link/fwd");
        let mut a2 = SimRng::new(7, "link/fwd");
        let mut b = SimRng::new(7, "link/rev");
        let mut c = SimRng::new(8, "link/fwd");
        let xa: Vec<u64> = (0..4).map(|_| a1.next_u64()).collect();
        let xa2: Vec<u64> = (0..4).map(|_| a2.next_u64()).collect();
        let xb: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        let xc: Vec<u64> = (0..4).map(|_| c.next_u64()).collect();
        assert_eq!(xa, xa2);
        assert_ne!(xa, xb);
        assert_ne!(xa, xc);
    }

    #[test]
    fn uniform_in_range_and_chance_zero_draws_nothing() {
        let mut r = SimRng::new(1, "x");
        for _ in 0..1000 {
            let u = r.uniform();
            assert!((0.0..1.0).contains(&u));
            assert!(r.below(10) < 10);
        }
        let mut r1 = SimRng::new(1, "y");
        let mut r2 = SimRng::new(1, "y");
        assert!(!r1.chance(0.0));
        assert_eq!(r1.next_u64(), r2.next_u64());
    }
}
