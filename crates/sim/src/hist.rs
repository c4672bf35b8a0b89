//! A log-linear histogram of non-negative integers (latencies in ns, byte counts), for
//! percentiles over millions of samples in constant memory.
//!
//! Values below 64 are kept exactly; above, each power of two is split into 32 linear
//! buckets, so a reported percentile is within 1/32 (about 3 %) of the true sample value.
//! Percentiles report the upper edge of their bucket, capped at the largest sample seen.

/// Linear sub-buckets per power of two.
const SUB: u64 = 32;
const SUB_BITS: u32 = 5;

/// Log-linear histogram (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    n: u64,
    sum: u128,
    min: u64,
    max: u64,
}

fn bucket_of(v: u64) -> usize {
    if v < 2 * SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS + 1
    let shift = exp - SUB_BITS;
    let mant = (v >> shift) - SUB; // 0..SUB
    (2 * SUB + u64::from(shift - 1) * SUB + mant) as usize
}

/// Largest value in bucket `b`.
fn bucket_high(b: usize) -> u64 {
    let b = b as u64;
    if b < 2 * SUB {
        return b;
    }
    let shift = (b - 2 * SUB) / SUB + 1;
    let mant = (b - 2 * SUB) % SUB + SUB;
    let edge = (u128::from(mant + 1) << shift) - 1;
    u64::try_from(edge).unwrap_or(u64::MAX)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram::default()
    }
    /// Record one sample.
    pub fn add(&mut self, v: u64) {
        let b = bucket_of(v);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        if self.n == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.n += 1;
        self.sum += u128::from(v);
    }
    /// Add every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        if other.n == 0 {
            return;
        }
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        if self.n == 0 || other.min < self.min {
            self.min = other.min;
        }
        self.max = self.max.max(other.max);
        self.n += other.n;
        self.sum += other.sum;
    }
    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.n
    }
    /// Largest sample (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }
    /// Smallest sample (0 when empty).
    pub fn min(&self) -> u64 {
        self.min
    }
    /// Mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }
    /// The `q`-quantile (`q` in `[0, 1]`): the smallest bucket edge with at least `q·n`
    /// samples at or below it (nearest-rank). `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(b).min(self.max).max(self.min));
            }
        }
        Some(self.max)
    }
    /// The distribution for a CDF: for every non-empty bucket in value order, its upper edge
    /// (capped at the largest sample, at least the smallest) and the fraction of samples at
    /// or below it. The last point is (`max`, 1.0); empty when there are no samples.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let mut out = Vec::new();
        let mut seen = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            seen += c;
            let v = bucket_high(b).min(self.max).max(self.min);
            out.push((v, seen as f64 / self.n as f64));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last, "bucket order at {v}");
            last = b;
            let hi = bucket_high(b);
            assert!(hi >= v, "value {v} above its bucket edge {hi}");
            // Relative width <= 1/32.
            assert!(
                (hi - v) as f64 <= (v as f64) / 32.0 + 1.0,
                "bucket too wide at {v}"
            );
        }
    }

    #[test]
    fn percentiles_nearest_rank() {
        let mut h = Histogram::new();
        for v in 1..=100 {
            h.add(v);
        }
        assert_eq!(h.quantile(0.5), Some(50));
        assert_eq!(h.quantile(0.99), Some(99));
        assert_eq!(h.quantile(1.0), Some(100));
        assert_eq!(h.count(), 100);
        assert!((h.mean() - 50.5).abs() < 1e-9);
        let mut big = Histogram::new();
        for _ in 0..99 {
            big.add(1_000_000);
        }
        big.add(5_000_000);
        let p50 = big.quantile(0.5).unwrap();
        assert!((1_000_000..=1_032_000).contains(&p50));
        assert_eq!(big.quantile(1.0), Some(5_000_000));
        let mut m = Histogram::new();
        m.merge(&h);
        m.merge(&big);
        assert_eq!(m.count(), 200);
        assert_eq!(m.max(), 5_000_000);
        assert_eq!(Histogram::new().quantile(0.5), None);
    }

    #[test]
    fn cdf_rises_to_one_and_agrees_with_quantiles() {
        assert!(Histogram::new().cdf().is_empty());
        let mut h = Histogram::new();
        for v in [3u64, 3, 70, 1000, 1000, 1000, 50_000, 7_000_000] {
            h.add(v);
        }
        let cdf = h.cdf();
        assert_eq!(cdf.first().map(|p| p.0), Some(3));
        assert_eq!(cdf.last(), Some(&(7_000_000, 1.0)));
        for w in cdf.windows(2) {
            assert!(w[1].0 > w[0].0 && w[1].1 > w[0].1, "{cdf:?}");
        }
        // The value where the CDF first reaches q is the q-quantile.
        for q in [0.25, 0.5, 0.75, 0.9] {
            let at = cdf.iter().find(|p| p.1 >= q).unwrap().0;
            assert_eq!(Some(at), h.quantile(q), "q {q}");
        }
        assert_eq!(cdf.len(), 5);
    }
}
