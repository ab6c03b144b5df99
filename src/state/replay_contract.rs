//! The contract every [`ReplayStore`] must meet, written once as functions over `&dyn
//! ReplayStore` so the memory store and the Redis store (on loopback) run the same suite.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use super::ReplayStore;

const TTL: Duration = Duration::from_secs(60);

/// A key is accepted once; the second use of the same key is a replay.
pub async fn second_use_is_a_replay(store: &dyn ReplayStore) {
    assert!(store.first_use("contract:a", TTL).await.unwrap(), "first use records the key");
    assert!(!store.first_use("contract:a", TTL).await.unwrap(), "second use is a replay");
    assert!(!store.first_use("contract:a", TTL).await.unwrap(), "and stays one");
}

/// Different keys never affect each other, including keys that share a prefix.
pub async fn distinct_keys_are_independent(store: &dyn ReplayStore) {
    assert!(store.first_use("contract:b", TTL).await.unwrap());
    assert!(store.first_use("contract:b2", TTL).await.unwrap());
    assert!(store.first_use("contract:", TTL).await.unwrap());
    assert!(!store.first_use("contract:b", TTL).await.unwrap());
}

/// Among `n` concurrent first uses of one key, exactly one records it.
pub async fn concurrent_first_uses_admit_exactly_one(store: Arc<dyn ReplayStore>, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let s = store.clone();
            tokio::spawn(async move { s.first_use("contract:race", TTL).await.unwrap() })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 1, "exactly one of {n} concurrent uses is first");
}
