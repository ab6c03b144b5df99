//! Quota counters (pipeline stage 10): the [`QuotaStore`] trait and its in-memory store.
//!
//! Buckets are GCRA (generic cell rate algorithm): a bucket of `limit` units refills evenly
//! over `per`, so `limit` units may be spent at once and then one unit every `per / limit`.
//! A spend of `cost` units is counted atomically: it either fits and is recorded, or it is
//! refused and records nothing. The store trusts its callers for keys and amounts (they come
//! from the policy decision) and bounds its own memory.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::StoreError;
use portcullis_wire::UnixTime;

/// One bucket a decision names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaSpec {
    /// The bucket, e.g. `payments:user-1842`.
    pub key: String,
    /// Units this request spends (the amount for money budgets).
    pub cost: u64,
    /// Units per `per`.
    pub limit: u64,
    /// The refill period.
    pub per: Duration,
    /// `"scope": "global"`: one bucket for every server (`[[servers]]`); else the key is
    /// counted per server.
    pub global: bool,
}

/// The result of one spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaOutcome {
    /// The cost fit and was counted.
    Spent {
        /// Whole units still available right now.
        remaining: u64,
    },
    /// The cost does not fit now; nothing was counted.
    Exhausted {
        /// When the same spend would fit (at least 1 ns).
        retry_after: Duration,
    },
}

/// A store of quota buckets, shared by every request (and, for Redis, every instance).
#[async_trait]
pub trait QuotaStore: Send + Sync {
    /// Runs once per quota the decision names, in order. Counts `cost` units against `key`'s
    /// bucket (`limit` units per `per`) at time `now` if they fit, atomically with respect
    /// to concurrent spends on the same key. `Exhausted` records nothing. `Err` means the
    /// store could not answer; the caller fails closed.
    async fn spend(&self, key: &str, cost: u64, limit: u64, per: Duration, now: UnixTime) -> Result<QuotaOutcome, StoreError>;

    /// Gives back `cost` units spent on `key` by a request that was then refused at a later
    /// quota, so a refused request leaves no trace. Never makes a bucket fuller than full.
    async fn refund(&self, key: &str, cost: u64, limit: u64, per: Duration, now: UnixTime) -> Result<(), StoreError>;
}

/// GCRA arithmetic in nanoseconds: the theoretical arrival time (`tat`) of a bucket moves
/// forward by `cost * per / limit` per spend; a spend fits while `tat` stays within `per` of now.
fn increment_ns(cost: u64, limit: u64, per: Duration) -> u128 {
    // Rounded up, so rounding never grants more than `limit` per `per`.
    (per.as_nanos() * u128::from(cost)).div_ceil(u128::from(limit.max(1)))
}

/// Decides one spend against a bucket whose theoretical arrival time is `tat`. Returns the
/// outcome and the new `tat` (unchanged when exhausted).
pub fn gcra(tat: u128, cost: u64, limit: u64, per: Duration, now: UnixTime) -> (QuotaOutcome, u128) {
    let now_ns = now.0.as_nanos();
    let per_ns = per.as_nanos();
    let new_tat = tat.max(now_ns) + increment_ns(cost, limit, per);
    let allowed_at = new_tat.saturating_sub(per_ns);
    if allowed_at > now_ns {
        let wait = allowed_at - now_ns;
        let retry_after = Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX).max(1));
        return (QuotaOutcome::Exhausted { retry_after }, tat);
    }
    let unit = increment_ns(1, limit, per).max(1);
    let remaining = u64::try_from((now_ns + per_ns - new_tat) / unit).unwrap_or(u64::MAX).min(limit);
    (QuotaOutcome::Spent { remaining }, new_tat)
}

/// The embedded store: one mutex-guarded map of buckets. Expired buckets (fully refilled, so
/// equal to a fresh one) are dropped; at `max_keys` live buckets a new key is refused with a
/// store error (fail closed) rather than evicting, and forgiving, someone's spent quota.
#[derive(Debug)]
pub struct MemoryQuotaStore {
    max_keys: usize,
    inner: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    tat: HashMap<String, u128>,
    last_sweep_ns: u128,
}

impl Buckets {
    /// Drops buckets whose `tat` has passed: they hold no spend any more.
    fn sweep(&mut self, now_ns: u128) {
        self.tat.retain(|_, tat| *tat > now_ns);
        self.last_sweep_ns = now_ns;
    }
}

/// How often a full store may sweep (a sweep is O(keys)).
const SWEEP_EVERY_NS: u128 = 1_000_000_000;

impl MemoryQuotaStore {
    /// A store holding at most `max_keys` live buckets.
    pub fn new(max_keys: usize) -> MemoryQuotaStore {
        MemoryQuotaStore { max_keys: max_keys.max(1), inner: Mutex::new(Buckets::default()) }
    }

    /// Live buckets now (for tests and metrics).
    pub fn len(&self) -> usize {
        self.inner.lock().map(|b| b.tat.len()).unwrap_or(0)
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Buckets>, StoreError> {
        self.inner.lock().map_err(|_| StoreError::Unavailable { store: "memory".to_owned(), reason: "quota map lock poisoned".to_owned() })
    }
}

#[async_trait]
impl QuotaStore for MemoryQuotaStore {
    async fn spend(&self, key: &str, cost: u64, limit: u64, per: Duration, now: UnixTime) -> Result<QuotaOutcome, StoreError> {
        let now_ns = now.0.as_nanos();
        let mut b = self.lock()?;
        let tat = b.tat.get(key).copied().unwrap_or(0);
        let (outcome, new_tat) = gcra(tat, cost, limit, per, now);
        if matches!(outcome, QuotaOutcome::Exhausted { .. }) || new_tat == tat {
            return Ok(outcome);
        }
        if !b.tat.contains_key(key) && b.tat.len() >= self.max_keys {
            if now_ns.saturating_sub(b.last_sweep_ns) >= SWEEP_EVERY_NS || b.last_sweep_ns > now_ns {
                b.sweep(now_ns);
            }
            if b.tat.len() >= self.max_keys {
                return Err(StoreError::Unavailable {
                    store: "memory".to_owned(),
                    reason: format!("quota store holds its maximum of {} buckets", self.max_keys),
                });
            }
        }
        b.tat.insert(key.to_owned(), new_tat);
        Ok(outcome)
    }

    async fn refund(&self, key: &str, cost: u64, limit: u64, per: Duration, now: UnixTime) -> Result<(), StoreError> {
        let now_ns = now.0.as_nanos();
        let mut b = self.lock()?;
        if let Some(tat) = b.tat.get_mut(key) {
            *tat = tat.saturating_sub(increment_ns(cost, limit, per));
            if *tat <= now_ns {
                b.tat.remove(key);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "quota_contract.rs"]
pub(crate) mod contract;
