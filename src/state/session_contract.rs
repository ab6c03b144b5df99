//! The contract every [`SessionStore`] must meet, written once as functions over `&dyn
//! SessionStore` so the memory store and the Redis store (on loopback) run the same suite.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{Binding, OwnerKey, SessionKey, SessionStore};

const TTL: Duration = Duration::from_secs(60);

fn session(name: &str) -> SessionKey {
    SessionKey::of(name.as_bytes())
}

fn alice() -> OwnerKey {
    OwnerKey::of(Some("https://agent-a.example"), Some("https://issuer.example"), Some("alice"))
}

fn bob() -> OwnerKey {
    OwnerKey::of(Some("https://agent-a.example"), Some("https://issuer.example"), Some("bob"))
}

/// A bound session belongs to its owner; another owner can neither use nor rebind it.
pub async fn a_session_belongs_to_the_owner_that_bound_it(store: &dyn SessionStore) {
    let s = session("contract:owned");
    assert_eq!(store.bind(&s, &alice(), TTL).await.unwrap(), Binding::Owner, "first bind");
    assert_eq!(store.verify(&s, &alice(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.verify(&s, &bob(), TTL).await.unwrap(), Binding::Other);
    assert_eq!(store.bind(&s, &bob(), TTL).await.unwrap(), Binding::Other, "no rebinding to another owner");
    assert_eq!(store.bind(&s, &alice(), TTL).await.unwrap(), Binding::Owner, "binding again to the owner is a no-op");
    assert_eq!(store.verify(&s, &alice(), TTL).await.unwrap(), Binding::Owner, "still the first owner's");
}

/// A session never bound is unbound for everyone, and sessions do not affect each other.
pub async fn unknown_sessions_are_unbound_and_sessions_are_independent(store: &dyn SessionStore) {
    assert_eq!(store.verify(&session("contract:never"), &alice(), TTL).await.unwrap(), Binding::Unbound);
    assert_eq!(store.bind(&session("contract:x"), &alice(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.bind(&session("contract:x2"), &bob(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.verify(&session("contract:x"), &bob(), TTL).await.unwrap(), Binding::Other);
    assert_eq!(store.verify(&session("contract:x2"), &bob(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.verify(&session("contract:"), &alice(), TTL).await.unwrap(), Binding::Unbound);
}

/// Only the owner's unbind removes a binding; afterwards the session is unbound.
pub async fn only_the_owner_unbinds(store: &dyn SessionStore) {
    let s = session("contract:ended");
    store.bind(&s, &alice(), TTL).await.unwrap();
    assert!(!store.unbind(&s, &bob()).await.unwrap(), "another owner cannot end it");
    assert_eq!(store.verify(&s, &alice(), TTL).await.unwrap(), Binding::Owner);
    assert!(store.unbind(&s, &alice()).await.unwrap());
    assert_eq!(store.verify(&s, &alice(), TTL).await.unwrap(), Binding::Unbound);
    assert!(!store.unbind(&s, &alice()).await.unwrap(), "nothing left to remove");
}

/// Among `n` concurrent binds of one session by different owners, exactly one wins, and the
/// session stays that owner's.
pub async fn concurrent_binds_have_exactly_one_winner(store: Arc<dyn SessionStore>, n: usize) {
    let s = session("contract:race");
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let owner = OwnerKey::of(None, None, Some(&format!("user-{i}")));
                (owner, store.bind(&s, &owner, TTL).await.unwrap())
            })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        let (owner, binding) = t.await.unwrap();
        assert_ne!(binding, Binding::Unbound, "bind never answers Unbound");
        if binding == Binding::Owner {
            winners.push(owner);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of {n} concurrent binds wins");
    assert_eq!(store.verify(&s, &winners[0], TTL).await.unwrap(), Binding::Owner);
}

/// A binding lives `ttl` after its last use: using it restarts the lifetime, idling past it
/// forgets the session. `advance` lets time pass (a manual clock, or real sleeps for Redis).
pub async fn a_binding_expires_after_ttl_without_use<F, Fut>(store: &dyn SessionStore, ttl: Duration, advance: F)
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    let s = session("contract:idle");
    let step = ttl.mul_f64(0.6);
    store.bind(&s, &alice(), ttl).await.unwrap();
    advance(step).await;
    assert_eq!(store.verify(&s, &alice(), ttl).await.unwrap(), Binding::Owner, "used within its lifetime");
    advance(step).await;
    assert_eq!(store.verify(&s, &alice(), ttl).await.unwrap(), Binding::Owner, "the use restarted the lifetime");
    advance(ttl + step).await;
    assert_eq!(store.verify(&s, &alice(), ttl).await.unwrap(), Binding::Unbound, "idle past its lifetime");
    assert_eq!(store.bind(&s, &bob(), ttl).await.unwrap(), Binding::Owner, "an expired binding holds nothing");
}

/// Every case above but the expiry (which needs the store's clock) against one shared store.
pub async fn every_case_but_expiry(store: Arc<dyn SessionStore>) {
    a_session_belongs_to_the_owner_that_bound_it(store.as_ref()).await;
    unknown_sessions_are_unbound_and_sessions_are_independent(store.as_ref()).await;
    only_the_owner_unbinds(store.as_ref()).await;
    concurrent_binds_have_exactly_one_winner(store, 100).await;
}
