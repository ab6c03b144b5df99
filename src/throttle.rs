//! Diagnostic lines that a flood could repeat at request rate (a failing backend, an exhausted
//! fetch budget, a misused session id) go through a [`Throttle`]: at most one line per
//! interval per call site, saying how many were held back. What every request did is in the
//! decision log and the metrics; stderr only has to tell an operator that it is happening.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// At most one line per [`Throttle::INTERVAL`] at one call site (a `static`).
#[derive(Debug)]
pub(crate) struct Throttle {
    /// Milliseconds since the process's first throttle use when the next line may go out.
    next_ms: AtomicU64,
    /// Lines held back since the last one written.
    held: AtomicU64,
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new()
    }
}

impl Throttle {
    /// The least time between two lines of one call site.
    pub(crate) const INTERVAL: Duration = Duration::from_secs(10);

    /// A call site's throttle, for a `static`.
    pub(crate) const fn new() -> Throttle {
        Throttle { next_ms: AtomicU64::new(0), held: AtomicU64::new(0) }
    }

    /// `Some(held)` when a line may be written now, with the number held back since the last
    /// one; `None` (and one more held back) otherwise.
    pub(crate) fn admit(&self) -> Option<u64> {
        self.admit_at(elapsed_ms())
    }

    fn admit_at(&self, now_ms: u64) -> Option<u64> {
        let next = self.next_ms.load(Ordering::Relaxed);
        let interval = u64::try_from(Self::INTERVAL.as_millis()).unwrap_or(u64::MAX);
        if now_ms >= next && self.next_ms.compare_exchange(next, now_ms.saturating_add(interval), Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            Some(self.held.swap(0, Ordering::Relaxed))
        } else {
            self.held.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

fn elapsed_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_counting_those_held_back() {
        let t = Throttle::new();
        assert_eq!(t.admit_at(1_000), Some(0));
        assert_eq!(t.admit_at(1_001), None);
        assert_eq!(t.admit_at(10_999), None);
        assert_eq!(t.admit_at(11_000), Some(2), "the next line says two were held back");
        assert_eq!(t.admit_at(11_000), None);
    }
}
