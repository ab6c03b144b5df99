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

/// `first_use_then` answers as `first_use(first)` then `first_use(then)` would: the first key
/// is recorded even when the second was already used, and a replayed first key records nothing.
/// The keys of a pair share a `{…}` hash tag, as the replay stage's do (one Redis Cluster slot).
pub async fn first_use_then_is_two_first_uses_in_turn(store: &dyn ReplayStore) {
    assert!(store.first_use_then("contract:{then}:s1", Some("contract:{then}:n1"), TTL).await.unwrap(), "both new");
    assert!(!store.first_use_then("contract:{then}:s1", Some("contract:{then}:n2"), TTL).await.unwrap(), "first key replayed");
    assert!(store.first_use("contract:{then}:n2", TTL).await.unwrap(), "so the second was not recorded");
    assert!(!store.first_use_then("contract:{then}:s2", Some("contract:{then}:n1"), TTL).await.unwrap(), "second key replayed");
    assert!(!store.first_use("contract:{then}:s2", TTL).await.unwrap(), "the first was recorded all the same");
    assert!(store.first_use_then("contract:{then}:s3", None, TTL).await.unwrap(), "one key");
    assert!(!store.first_use_then("contract:{then}:s3", None, TTL).await.unwrap());
}

/// Among `n` concurrent `first_use_then` calls with one pair of keys, exactly one is first.
pub async fn concurrent_pairs_admit_exactly_one(store: Arc<dyn ReplayStore>, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let s = store.clone();
            tokio::spawn(async move { s.first_use_then("contract:{pair}:sig", Some("contract:{pair}:nonce"), TTL).await.unwrap() })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 1, "exactly one of {n} concurrent pairs is first");
}

/// Every case above against one shared store (keys of one run do not collide).
pub async fn every_case(store: Arc<dyn ReplayStore>) {
    second_use_is_a_replay(store.as_ref()).await;
    distinct_keys_are_independent(store.as_ref()).await;
    concurrent_first_uses_admit_exactly_one(store.clone(), 100).await;
    first_use_then_is_two_first_uses_in_turn(store.as_ref()).await;
    concurrent_pairs_admit_exactly_one(store, 100).await;
}
