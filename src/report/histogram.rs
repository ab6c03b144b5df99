//! A fixed-size log-linear histogram of microsecond latencies: 16 linear sub-buckets per power
//! of two, so any quantile is within ~6% of the true value and memory is constant (1 KiB of
//! counters) however many values are recorded.

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// Latency distribution in microseconds.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS], total: 0, max: 0 }
    }
}

fn index(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let log = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = log - SUB_BITS;
    let sub = ((v >> shift) as usize) & (SUB - 1);
    ((shift as usize + 1) * SUB) + sub
}

/// The smallest value that falls in bucket `i` (its representative).
fn lower_bound(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let shift = (i / SUB - 1) as u32;
    let sub = (i % SUB) as u64;
    (SUB as u64 + sub) << shift
}

impl Histogram {
    /// Adds one value.
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    /// Adds every value recorded in `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.total
    }

    /// The largest value recorded (exact).
    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0.0–1.0), as the lower bound of its bucket; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return lower_bound(i).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact_and_large_ones_within_a_sixteenth() {
        for v in [0u64, 1, 15, 16, 17, 100, 1_000, 123_456, 10_000_000, u64::MAX / 3] {
            let lb = lower_bound(index(v));
            assert!(lb <= v, "{v}: {lb}");
            assert!(v - lb <= v / 16, "{v}: {lb}");
        }
    }

    #[test]
    fn quantiles_follow_the_distribution() {
        let mut h = Histogram::default();
        for v in 1..=1000 {
            h.record(v);
        }
        let p50 = h.quantile(0.5);
        let p99 = h.quantile(0.99);
        assert!((470..=500).contains(&p50), "{p50}");
        assert!((930..=990).contains(&p99), "{p99}");
        assert_eq!(h.max(), 1000);
        assert_eq!(h.count(), 1000);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn merged_histograms_hold_both() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        (1..=500).for_each(|v| a.record(v));
        (501..=1000).for_each(|v| b.record(v));
        a.merge(&b);
        assert_eq!(a.count(), 1000);
        assert_eq!(a.max(), 1000);
        assert!((470..=500).contains(&a.quantile(0.5)));
    }

    proptest::proptest! {
        #[test]
        fn bucket_bounds_bracket_every_value(v in proptest::num::u64::ANY) {
            let i = index(v);
            proptest::prop_assert!(i < BUCKETS);
            proptest::prop_assert!(lower_bound(i) <= v);
            if i + 1 < BUCKETS {
                proptest::prop_assert!(lower_bound(i + 1) > v);
            }
        }
    }
}
