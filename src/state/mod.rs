//! Shared state behind small traits: the replay cache (stage 6) and quota counters (stage 10).
//! `memory` is the embedded default; a Redis store (several instances) implements the same
//! traits, and one contract test suite per trait runs against each store.
//!
//! The traits use `async-trait` so stores can be held as `Arc<dyn …>` and chosen by config.

pub mod quota;
pub mod redis;
pub mod replay;

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
