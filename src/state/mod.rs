//! Shared state behind small traits: the replay cache (stage 6) and quota counters (stage 10).
//! `memory` is the embedded default; a Redis store (several instances) implements the same
//! traits, and one contract test suite per trait runs against each store.

pub mod quota;
pub mod replay;
