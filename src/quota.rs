//! Quotas and rate limits (pipeline stage 10): spends the buckets the policy decision names.
//!
//! Each quota is `{key, cost, limit, per}` from the decision (policy.rs has already checked its
//! shape). All of a request's quotas are spent or none is: they are spent in order, and when one
//! is exhausted the ones already spent are refunded, so a request refused at a later quota does
//! not use up earlier ones. Between the spend and the refund a concurrent request may see the
//! earlier bucket fuller than it will end up; that errs on the side of refusing. A store that
//! cannot answer refuses the request (fail closed).

use std::sync::Arc;
use std::time::Duration;

use crate::state::quota::{QuotaOutcome, QuotaStore};
use crate::state::StoreError;
use portcullis_wire::UnixTime;

/// One bucket a decision names (defined beside the stores, which spend it).
pub use crate::state::quota::QuotaSpec;

/// Why the quota stage refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QuotaError {
    /// The bucket `key` has no room for this request's cost now.
    #[error("quota {key:?} is exhausted, retry after {retry_after:?}")]
    Exhausted {
        /// The bucket that refused.
        key: String,
        /// When the same spend would fit.
        retry_after: Duration,
    },
    /// The quota store could not answer.
    #[error("quota store: {0}")]
    Store(#[from] StoreError),
}

/// The quota stage, holding the shared store.
#[derive(Clone)]
pub(crate) struct Quotas {
    store: Arc<dyn QuotaStore>,
}

impl std::fmt::Debug for Quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quotas").finish_non_exhaustive()
    }
}

impl Quotas {
    /// The stage over `store`.
    pub(crate) fn new(store: Arc<dyn QuotaStore>) -> Quotas {
        Quotas { store }
    }

    /// Spends every quota in `specs` at `now`, or none of them.
    pub(crate) async fn spend(&self, specs: &[QuotaSpec], now: UnixTime) -> Result<(), QuotaError> {
        for (i, q) in specs.iter().enumerate() {
            let outcome = match self.store.spend(&q.key, q.cost, q.limit, q.per, now).await {
                Ok(o) => o,
                Err(e) => {
                    self.refund(&specs[..i], now).await;
                    return Err(e.into());
                }
            };
            if let QuotaOutcome::Exhausted { retry_after } = outcome {
                self.refund(&specs[..i], now).await;
                return Err(QuotaError::Exhausted { key: q.key.clone(), retry_after });
            }
        }
        Ok(())
    }

    async fn refund(&self, spent: &[QuotaSpec], now: UnixTime) {
        for q in spent {
            if let Err(e) = self.store.refund(&q.key, q.cost, q.limit, q.per, now).await {
                // The request is refused either way; the bucket stays spent (fails closed).
                static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
                if let Some(held) = THROTTLE.admit() {
                    tracing::warn!(error = %e, similar_held_back = held, "Quota refund failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::quota::MemoryQuotaStore;

    fn spec(key: &str, limit: u64) -> QuotaSpec {
        QuotaSpec { key: key.into(), cost: 1, limit, per: Duration::from_secs(60), global: false }
    }

    struct DownStore;
    #[async_trait::async_trait]
    impl QuotaStore for DownStore {
        async fn spend(&self, _: &str, _: u64, _: u64, _: Duration, _: UnixTime) -> Result<QuotaOutcome, StoreError> {
            Err(StoreError::Unavailable { store: "test".into(), reason: "down".into() })
        }
        async fn refund(&self, _: &str, _: u64, _: u64, _: Duration, _: UnixTime) -> Result<(), StoreError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn refusal_at_a_later_quota_refunds_the_earlier_ones() {
        let store = Arc::new(MemoryQuotaStore::new(100));
        let q = Quotas::new(store.clone());
        let now = UnixTime(Duration::from_secs(1000));
        q.spend(&[spec("tight", 1)], now).await.expect("first fits");
        let err = q.spend(&[spec("roomy", 1), spec("tight", 1)], now).await.expect_err("tight is spent");
        assert!(matches!(&err, QuotaError::Exhausted { key, retry_after } if key == "tight" && *retry_after == Duration::from_secs(60)), "{err:?}");
        // `roomy` was refunded: its single unit is still there.
        q.spend(&[spec("roomy", 1)], now).await.expect("roomy untouched");
    }

    #[tokio::test]
    async fn store_error_is_a_store_refusal() {
        let q = Quotas::new(Arc::new(DownStore));
        let err = q.spend(&[spec("k", 1)], UnixTime(Duration::ZERO)).await.expect_err("fails closed");
        assert!(matches!(err, QuotaError::Store(_)));
    }
}
