//! Shared state behind small traits: the replay cache (stage 6), session bindings (decision 9),
//! quota counters (stage 10), the idempotency journal and approval records. Every store a
//! caller can fill is bounded per caller beside its global bound ([`caller`], decision 13).
//! `memory` is the embedded default; a Redis store (several instances) implements the same
//! traits, and one contract test suite per trait runs against each store.
//!
//! One file per store holds its trait, its memory store and its contract suite (`replay`,
//! `quota`, `session`, `journal`, `approval`, plus `admit`, a trait only Redis implements, and
//! `caller`, the per-caller bound they share); `redis/` holds the Redis store, one file per
//! store beside the connection they share (`redis/mod.rs`).
//!
//! The traits use `async-trait` so stores can be held as `Arc<dyn …>` and chosen by config.

pub mod admit;
pub mod approval;
pub mod caller;
pub mod journal;
pub mod quota;
pub mod redis;
pub mod replay;
pub mod session;

use std::sync::Arc;

use crate::config::{FieldError, Idempotency, StateSettings, Store};
use approval::{ApprovalStore, MemoryApprovalStore};
use journal::{JournalStore, MemoryJournalStore};
use quota::{MemoryQuotaStore, QuotaStore};
use redis::{RedisSettings, RedisStore};
use replay::{MemoryReplayStore, ReplayStore};
use session::{MemorySessionStore, SessionStore};

/// The stores chosen by `state.store`, built once at start.
#[derive(Clone)]
pub struct Stores {
    /// Stage 6: signatures accepted once.
    pub replay: Arc<dyn ReplayStore>,
    /// Stage 10: quota buckets.
    pub quota: Arc<dyn QuotaStore>,
    /// Decision 9: which identity owns each `Mcp-Session-Id`.
    pub session: Arc<dyn SessionStore>,
    /// Human approval records.
    pub approval: Arc<dyn ApprovalStore>,
    /// The idempotency journal (used only while `idempotency.enabled`).
    pub journal: Arc<dyn JournalStore>,
    /// The shared Redis, when `state.store` names one (for readiness and metrics).
    pub redis: Option<Arc<RedisStore>>,
    /// Replay records and quotas in one round trip: a single Redis server only (on a cluster
    /// they live in different slots), `None` otherwise.
    pub admit: Option<Arc<dyn admit::AdmitStore>>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").field("redis", &self.redis).finish_non_exhaustive()
    }
}

impl Stores {
    /// `memory`: in-process stores bounded by `state.max_replay_entries`,
    /// `state.max_quota_keys`, `state.max_sessions`, `idempotency.max_entries` and
    /// `idempotency.max_bytes`. `redis://…`: one shared connection for every store (it connects
    /// on first use, so the gateway can start before Redis and report itself unready until then).
    pub fn from_config(cfg: &StateSettings, idempotency: &Idempotency) -> Result<Stores, FieldError> {
        let url = match &cfg.store {
            Store::Redis(url) => url.clone(),
            Store::Memory => {
                return Ok(Stores {
                    replay: Arc::new(MemoryReplayStore::new(cfg.max_replay_entries)),
                    quota: Arc::new(MemoryQuotaStore::new(cfg.max_quota_keys)),
                    session: Arc::new(MemorySessionStore::new(cfg.max_sessions)),
                    approval: Arc::new(MemoryApprovalStore::new(approval::MAX_MEMORY_RECORDS)),
                    journal: Arc::new(MemoryJournalStore::new(idempotency.max_entries, idempotency.max_bytes)),
                    redis: None,
                    admit: None,
                })
            }
        };
        let ca_pem = match &cfg.ca {
            Some(path) => Some(std::fs::read(path).map_err(|e| FieldError::new("state.ca", format!("cannot read {}: {e}", path.display())))?),
            None => None,
        };
        let redis = RedisStore::new(RedisSettings {
            url,
            prefix: cfg.prefix.clone(),
            connect_timeout: cfg.connect_timeout,
            command_timeout: cfg.command_timeout,
            ca_pem,
        })
        .map(Arc::new)
        .map_err(|e| FieldError::new("state.store", e))?;
        let admit: Option<Arc<dyn admit::AdmitStore>> = if redis.is_cluster() { None } else { Some(redis.clone()) };
        Ok(Stores {
            replay: redis.clone(),
            quota: redis.clone(),
            session: redis.clone(),
            approval: redis.clone(),
            journal: redis.clone(),
            redis: Some(redis),
            admit,
        })
    }
}

/// A store operation that could not be completed. The pipeline turns it into
/// `Denial::StateUnavailable` (503 in enforce mode): a store that cannot answer never lets a
/// request through as if it had said yes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer (connection refused, timeout, broken connection).
    #[error("{store} unavailable: {reason}")]
    Unavailable {
        /// Which store, e.g. "redis://127.0.0.1:6379".
        store: String,
        /// What failed.
        reason: String,
    },
}
