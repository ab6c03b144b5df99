//! Admission in one round trip: a signature's replay records and the quotas its decision names,
//! checked and written by one Lua script on one Redis server.
//!
//! Without it a signed request with a quota costs two Redis round trips (the replay records at
//! stage 6, the quota spend at stage 10). When the store is a single Redis server and the
//! identity stages enforce, the pipeline defers the replay records to the point where the
//! quotas are known, and, for a decision that needs neither an approval nor the idempotency
//! journal, does both here. The answer is the one the two stages would give in turn: a replayed
//! signature spends nothing; a signature seen for the first time is recorded even when a quota
//! then refuses it; quotas are spent all or none (atomically, where stage 10 spends them in order
//! and refunds). A Redis Cluster keeps the two round trips: a replay record and a quota bucket
//! live in different hash slots.

use std::time::Duration;

use async_trait::async_trait;

use super::quota::QuotaSpec;
use super::StoreError;
use portcullis_wire::UnixTime;

/// A signature's replay records (`ReplayGuard::keys`): `first`, then `then` (its nonce) when
/// present, kept for `ttl`. Both share a hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayKeys {
    /// The record of the signature bytes.
    pub first: String,
    /// The record of its nonce.
    pub then: Option<String>,
    /// How long both are kept.
    pub ttl: Duration,
}

/// What the admission script found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Recorded and spent: the request goes on.
    Admitted,
    /// The signature (or its nonce) was already used; nothing was spent.
    Replayed,
    /// Recorded, but quota `index` of the list has no room for `retry_after`; nothing was spent.
    Exhausted {
        /// Which quota refused.
        index: usize,
        /// When the same spend would fit.
        retry_after: Duration,
    },
}

/// A store that checks replay records and spends quotas in one round trip.
#[async_trait]
pub trait AdmitStore: Send + Sync {
    /// Records `replay` if new, then spends every one of `quotas` at `now`, or none.
    async fn admit(&self, replay: &ReplayKeys, quotas: &[QuotaSpec], now: UnixTime) -> Result<Admission, StoreError>;
}
