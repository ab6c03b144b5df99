//! Replay store: each signature fingerprint or nonce is accepted once until it expires (stage 6).
//!
//! [`ReplayStore::first_use`] is an atomic check-and-record (Web Bot Auth "Freshness and Replay": duplicate
//! detection needs an atomic check across every instance that enforces it). The memory store
//! is exact within one process; a Redis store implements the same contract with
//! `SET key 1 NX PX ttl`. A store that cannot record a key answers with an error, never with
//! "first use": the pipeline then refuses (fail closed), because claiming replay protection
//! without a record would be false (WBA "Freshness and Replay").

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::StoreError;

/// An atomic "have I seen this key before?" store with per-key lifetimes.
#[async_trait]
pub trait ReplayStore: Send + Sync {
    /// Records `key` for `ttl` if it is not already recorded.
    ///
    /// Runs once per replay key of a verified signature (stage 6). Returns `Ok(true)` when this
    /// call recorded the key (first use), `Ok(false)` when a live record already exists (a
    /// replay). Among concurrent calls with the same key, exactly one gets `Ok(true)`.
    /// `Err` means nothing can be said (store down, or full): the caller must refuse.
    async fn first_use(&self, key: &str, ttl: Duration) -> Result<bool, StoreError>;

    /// `first_use(first)`, then, only if that was a first use, `first_use(then)`: `Ok(true)`
    /// when both were first uses. A store that can do both in one round trip (Redis: one script)
    /// overrides this; the answer is the same as the two calls in turn.
    async fn first_use_then(&self, first: &str, then: Option<&str>, ttl: Duration) -> Result<bool, StoreError> {
        if !self.first_use(first, ttl).await? {
            return Ok(false);
        }
        match then {
            Some(key) => self.first_use(key, ttl).await,
            None => Ok(true),
        }
    }
}

/// The time source of the memory store; tests substitute a manual clock.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

const SHARDS: usize = 16;

/// The single-process replay store: a sharded map of key → expiry, bounded by `max_entries`.
///
/// Expired entries are swept lazily: a shard sweeps itself when it has doubled in size since
/// its last sweep, and every shard is swept before the store reports itself full. When
/// `max_entries` live records exist, new keys are refused with an error rather than evicting
/// a live record: forgetting a record would let that signature be replayed.
///
/// A record is 32 bytes plus the map's overhead: the key is kept as the first 128 bits of its
/// SHA-256 (a false "replayed" needs a 128-bit collision) and needs no allocation, so a
/// million records take about 40–70 MB (sizing: records = 2 × peak signed req/s ×
/// (signature lifetime + clock skew) when signatures carry a nonce).
pub struct MemoryReplayStore {
    shards: Box<[Mutex<Shard>]>,
    len: AtomicUsize,
    max_entries: usize,
    clock: Clock,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<u128, Instant, BuildHasherDefault<Prehashed>>,
    size_at_last_sweep: usize,
}

/// The map's hasher: a key is already a SHA-256 output, which no client can steer, so its low
/// 64 bits are a hash as good as any (and HashDoS-safe) at no cost.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, n: u128) {
        // Truncation intended: the low 64 bits of a uniformly random value.
        self.0 = n as u64;
    }
}

/// The first 128 bits of SHA-256(`key`).
fn fingerprint(key: &str) -> u128 {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}

impl Shard {
    /// Removes expired entries; returns how many were removed.
    fn sweep(&mut self, now: Instant) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, expires| *expires > now);
        self.size_at_last_sweep = self.entries.len();
        before - self.entries.len()
    }
}

impl std::fmt::Debug for MemoryReplayStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryReplayStore").field("len", &self.len.load(Ordering::Relaxed)).field("max_entries", &self.max_entries).finish()
    }
}

/// The name used in store errors.
const STORE_NAME: &str = "memory replay store";

enum Attempt {
    Recorded,
    Replayed,
    Full,
}

impl MemoryReplayStore {
    /// A store holding at most `max_entries` live records (`state.max_replay_entries`).
    pub fn new(max_entries: usize) -> Self {
        Self::with_clock(max_entries, Arc::new(Instant::now))
    }

    /// A store reading time from `clock` (tests move time by hand).
    pub fn with_clock(max_entries: usize, clock: Clock) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        MemoryReplayStore { shards, len: AtomicUsize::new(0), max_entries, clock }
    }

    /// Live and not yet swept records.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, index: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard lock leaves the map consistent (each operation is a
        // single insert or retain), so a poisoned lock is still usable.
        self.shards[index].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sweep_shard(&self, shard: &mut Shard, now: Instant) {
        let removed = shard.sweep(now);
        self.len.fetch_sub(removed, Ordering::AcqRel);
    }

    fn attempt(&self, index: usize, key: u128, expires: Instant, now: Instant) -> Attempt {
        let mut shard = self.shard(index);
        if let Some(existing) = shard.entries.get_mut(&key) {
            if *existing > now {
                return Attempt::Replayed;
            }
            // An expired record is not evidence of anything any more: reuse its slot.
            *existing = expires;
            return Attempt::Recorded;
        }
        if shard.entries.len() >= 2 * shard.size_at_last_sweep.max(64) {
            self.sweep_shard(&mut shard, now);
        }
        // Reserve a slot before inserting so concurrent inserts in other shards cannot exceed
        // the bound together.
        if self.len.fetch_add(1, Ordering::AcqRel) >= self.max_entries {
            self.len.fetch_sub(1, Ordering::AcqRel);
            return Attempt::Full;
        }
        shard.entries.insert(key, expires);
        Attempt::Recorded
    }
}

#[async_trait]
impl ReplayStore for MemoryReplayStore {
    async fn first_use(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        let now = (self.clock)();
        let expires = now.checked_add(ttl).ok_or_else(|| StoreError::Unavailable { store: STORE_NAME.into(), reason: format!("ttl {ttl:?} too large") })?;
        let key = fingerprint(key);
        // The top bits pick the shard, the low bits the bucket within it.
        let index = (key >> 120) as usize % SHARDS;
        match self.attempt(index, key, expires, now) {
            Attempt::Recorded => return Ok(true),
            Attempt::Replayed => return Ok(false),
            Attempt::Full => {}
        }
        // Full: sweep every shard (one lock at a time, never nested) and try once more.
        for i in 0..SHARDS {
            let mut shard = self.shard(i);
            self.sweep_shard(&mut shard, now);
        }
        match self.attempt(index, key, expires, now) {
            Attempt::Recorded => Ok(true),
            Attempt::Replayed => Ok(false),
            Attempt::Full => {
                Err(StoreError::Unavailable { store: STORE_NAME.into(), reason: format!("full: {} live records (state.max_replay_entries)", self.max_entries) })
            }
        }
    }
}

#[cfg(test)]
#[path = "replay_contract.rs"]
pub(crate) mod contract;

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
