//! Replay protection (pipeline stage 6): a verified signature is accepted once.
//!
//! Decides whether this exact signature (or its nonce) was already accepted. The record key
//! is the keyid plus a SHA-256 of the signature bytes, so relabelling a captured signature
//! (RFC 9421 §7.2.5) does not make it new; when a `nonce` is present, the keyid plus the nonce
//! is also single-use (docs/design.md decision 4, RFC 9421 §7.2.2). Records are kept until the
//! signature's `expires` plus the clock skew, after which the signature stage refuses it
//! anyway. Trusts only a [`VerifiedSignature`] and the [`ReplayStore`]'s atomic answer; a store
//! that cannot answer refuses the request (Web Bot Auth "Freshness and Replay": no claim of replay protection
//! without a record).

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use prometheus_client::metrics::counter::Counter;
use sha2::{Digest, Sha256};

use crate::signature::VerifiedSignature;
use crate::state::admit::ReplayKeys;
use crate::state::replay::ReplayStore;
use crate::state::StoreError;
use portcullis_wire::UnixTime;

/// Why the replay stage refused a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReplayError {
    /// This signature (same keyid and signature bytes), or its nonce, was already accepted.
    #[error("signature was already used")]
    Replayed,
    /// The replay store could not record the signature (down, or full): fail closed.
    #[error("replay store: {0}")]
    Store(#[from] StoreError),
}

/// The replay stage, built from `[signatures]` and the configured store.
pub(crate) struct ReplayGuard {
    store: Arc<dyn ReplayStore>,
    skew: Duration,
    hits: Counter,
}

impl std::fmt::Debug for ReplayGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayGuard").field("skew", &self.skew).finish_non_exhaustive()
    }
}

/// Least time a record is kept, so a signature right at its `expires` is still recorded.
const MIN_TTL: Duration = Duration::from_secs(1);

impl ReplayGuard {
    /// A guard over `store`, keeping records until `expires + signatures.clock_skew`.
    pub(crate) fn new(clock_skew: Duration, store: Arc<dyn ReplayStore>) -> Self {
        ReplayGuard { store, skew: clock_skew, hits: Counter::default() }
    }

    /// The counter of refused replays, for the metrics registry.
    pub(crate) fn hit_counter(&self) -> Counter {
        self.hits.clone()
    }

    /// Records `sig` as used; `Err(Replayed)` if it (or its nonce) already was. Exactly one of
    /// several concurrent copies passes, as the store's `first_use` is atomic.
    pub(crate) async fn check_once(&self, sig: &VerifiedSignature, now: UnixTime) -> Result<(), ReplayError> {
        self.check_keys(&self.keys(sig, now)).await
    }

    /// The records `sig` needs (for the pipeline's one-round-trip admission, which writes them
    /// together with the quotas: `state::admit`).
    pub(crate) fn keys(&self, sig: &VerifiedSignature, now: UnixTime) -> ReplayKeys {
        self.keys_of(sig.keyid(), sig.signature_bytes(), sig.nonce(), sig.expires(), now)
    }

    /// Records `keys`; `Err(Replayed)` (counted) if either already was.
    pub(crate) async fn check_keys(&self, keys: &ReplayKeys) -> Result<(), ReplayError> {
        if self.store.first_use_then(&keys.first, keys.then.as_deref(), keys.ttl).await? {
            Ok(())
        } else {
            Err(self.replayed())
        }
    }

    /// A replay found elsewhere (the admission script): counted like one found here.
    pub(crate) fn replayed(&self) -> ReplayError {
        self.hits.inc();
        ReplayError::Replayed
    }

    #[cfg(test)]
    async fn check_parts(&self, keyid: &str, signature: &[u8], nonce: Option<&str>, expires: i64, now: UnixTime) -> Result<(), ReplayError> {
        self.check_keys(&self.keys_of(keyid, signature, nonce, expires, now)).await
    }

    fn keys_of(&self, keyid: &str, signature: &[u8], nonce: Option<&str>, expires: i64, now: UnixTime) -> ReplayKeys {
        let ttl = self.ttl(expires, now);
        let signature_digest = URL_SAFE_NO_PAD.encode(Sha256::digest(signature));
        // The nonce is hashed so a long nonce costs the store no more than a short one. Both
        // records of a signature share a hash tag, `{…}` (the nonce's digest, else the
        // signature's), so one script writes both in one round trip, on one Redis Cluster node.
        // The tag is a function of the signature: the nonce is a covered parameter, so every
        // copy of a signature carries the same one and lands on the same records.
        let nonce_digest = nonce.map(|n| URL_SAFE_NO_PAD.encode(Sha256::digest(n.as_bytes())));
        let (first, then) = match &nonce_digest {
            Some(n) => (format!("sig:{{{n}}}:{keyid}:{signature_digest}"), Some(format!("nonce:{{{n}}}:{keyid}"))),
            None => (format!("sig:{{{signature_digest}}}:{keyid}"), None),
        };
        ReplayKeys { first, then, ttl }
    }

    /// Time until `expires + skew`, at least [`MIN_TTL`].
    fn ttl(&self, expires: i64, now: UnixTime) -> Duration {
        let until = Duration::from_secs(u64::try_from(expires).unwrap_or(0)) + self.skew;
        until.saturating_sub(now.0).max(MIN_TTL)
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;
    use crate::state::replay::MemoryReplayStore;

    fn guard(store: Arc<dyn ReplayStore>) -> ReplayGuard {
        ReplayGuard::new(Duration::from_secs(30), store)
    }

    const NOW: UnixTime = UnixTime(Duration::from_secs(1_800_000_000));

    #[tokio::test]
    async fn second_use_of_a_signature_is_replayed_and_counted() {
        let g = guard(Arc::new(MemoryReplayStore::new(100)));
        assert_eq!(g.check_parts("kid", b"sig-bytes", None, 1_800_000_060, NOW).await, Ok(()));
        assert_eq!(g.check_parts("kid", b"sig-bytes", None, 1_800_000_060, NOW).await, Err(ReplayError::Replayed));
        assert_eq!(g.hit_counter().get(), 1);
    }

    #[tokio::test]
    async fn same_bytes_under_another_key_are_a_different_signature() {
        let g = guard(Arc::new(MemoryReplayStore::new(100)));
        assert_eq!(g.check_parts("kid-a", b"sig", None, 1_800_000_060, NOW).await, Ok(()));
        assert_eq!(g.check_parts("kid-b", b"sig", None, 1_800_000_060, NOW).await, Ok(()));
    }

    #[tokio::test]
    async fn reused_nonce_is_replayed_even_with_new_signature_bytes() {
        let g = guard(Arc::new(MemoryReplayStore::new(100)));
        assert_eq!(g.check_parts("kid", b"first", Some("n-1"), 1_800_000_060, NOW).await, Ok(()));
        assert_eq!(g.check_parts("kid", b"second", Some("n-1"), 1_800_000_060, NOW).await, Err(ReplayError::Replayed));
        assert_eq!(g.check_parts("kid", b"third", Some("n-2"), 1_800_000_060, NOW).await, Ok(()));
    }

    #[test]
    fn records_live_until_expires_plus_skew() {
        let g = guard(Arc::new(MemoryReplayStore::new(1)));
        assert_eq!(g.ttl(1_800_000_060, NOW), Duration::from_secs(60 + 30));
        assert_eq!(g.ttl(1_700_000_000, NOW), MIN_TTL, "already expired: still recorded briefly");
        assert_eq!(g.ttl(-5, NOW), MIN_TTL);
    }

    struct DownStore;

    #[async_trait]
    impl ReplayStore for DownStore {
        async fn first_use(&self, _key: &str, _ttl: Duration) -> Result<bool, StoreError> {
            Err(StoreError::Unavailable { store: "test store".into(), reason: "connection refused".into() })
        }
    }

    #[tokio::test]
    async fn unavailable_store_is_an_error_not_a_pass() {
        let g = guard(Arc::new(DownStore));
        let err = g.check_parts("kid", b"sig", None, 1_800_000_060, NOW).await.expect_err("store down");
        assert!(matches!(err, ReplayError::Store(_)), "{err:?}");
        assert!(err.to_string().contains("connection refused"));
    }
}
