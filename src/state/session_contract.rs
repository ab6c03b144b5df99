//! The contract every [`SessionStore`] must meet, written once as functions over `&dyn
//! SessionStore` so the memory store and the Redis store (on loopback) run the same suite.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{Binding, OwnerKey, SessionKey, SessionStore};
use crate::state::caller::{CallerBound, CallerKey};

const TTL: Duration = Duration::from_secs(60);

fn session(name: &str) -> SessionKey {
    SessionKey::of(name.as_bytes())
}

/// A caller with room for every session a case opens.
pub(crate) fn roomy() -> CallerBound {
    CallerBound::new(CallerKey::agent("contract"), 10_000)
}

fn is_caller_full(b: Binding, at_most: Duration) -> bool {
    matches!(b, Binding::CallerFull(f) if !f.retry_after.is_zero() && f.retry_after <= at_most)
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
    assert_eq!(store.bind(&s, &alice(), &roomy(), TTL).await.unwrap(), Binding::Owner, "first bind");
    assert_eq!(store.verify(&s, &alice(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.verify(&s, &bob(), TTL).await.unwrap(), Binding::Other);
    assert_eq!(store.bind(&s, &bob(), &roomy(), TTL).await.unwrap(), Binding::Other, "no rebinding to another owner");
    assert_eq!(store.bind(&s, &alice(), &roomy(), TTL).await.unwrap(), Binding::Owner, "binding again to the owner is a no-op");
    assert_eq!(store.verify(&s, &alice(), TTL).await.unwrap(), Binding::Owner, "still the first owner's");
}

/// A session never bound is unbound for everyone, and sessions do not affect each other.
pub async fn unknown_sessions_are_unbound_and_sessions_are_independent(store: &dyn SessionStore) {
    assert_eq!(store.verify(&session("contract:never"), &alice(), TTL).await.unwrap(), Binding::Unbound);
    assert_eq!(store.bind(&session("contract:x"), &alice(), &roomy(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.bind(&session("contract:x2"), &bob(), &roomy(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.verify(&session("contract:x"), &bob(), TTL).await.unwrap(), Binding::Other);
    assert_eq!(store.verify(&session("contract:x2"), &bob(), TTL).await.unwrap(), Binding::Owner);
    assert_eq!(store.verify(&session("contract:"), &alice(), TTL).await.unwrap(), Binding::Unbound);
}

/// Only the owner's unbind removes a binding; afterwards the session is unbound.
pub async fn only_the_owner_unbinds(store: &dyn SessionStore) {
    let s = session("contract:ended");
    store.bind(&s, &alice(), &roomy(), TTL).await.unwrap();
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
                (owner, store.bind(&s, &owner, &roomy(), TTL).await.unwrap())
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

/// Decision 13: a caller at its bound binds no new session (and is told when one would leave)
/// while other callers go on; its own sessions still work; ending one frees its slot.
pub async fn each_caller_is_bounded_and_others_are_unaffected(store: &dyn SessionStore) {
    let mallory = CallerBound::new(CallerKey::user("https://issuer.example", "mallory"), 2);
    let owner = OwnerKey::of(None, Some("https://issuer.example"), Some("mallory"));
    for name in ["contract:m1", "contract:m2"] {
        assert_eq!(store.bind(&session(name), &owner, &mallory, TTL).await.unwrap(), Binding::Owner, "{name}");
    }
    assert!(is_caller_full(store.bind(&session("contract:m3"), &owner, &mallory, TTL).await.unwrap(), TTL * 2), "a third session is over the bound");
    assert_eq!(store.verify(&session("contract:m3"), &owner, TTL).await.unwrap(), Binding::Unbound, "nothing was bound");
    let alice_bound = CallerBound::new(CallerKey::user("https://issuer.example", "alice"), 2);
    assert_eq!(store.bind(&session("contract:a1"), &alice(), &alice_bound, TTL).await.unwrap(), Binding::Owner, "another caller is unaffected");
    assert_eq!(store.verify(&session("contract:m1"), &owner, TTL).await.unwrap(), Binding::Owner, "its own sessions still work");
    assert_eq!(store.bind(&session("contract:m1"), &owner, &mallory, TTL).await.unwrap(), Binding::Owner, "binding a held session again is no new session");
    assert!(store.unbind(&session("contract:m1"), &owner).await.unwrap());
    assert_eq!(store.bind(&session("contract:m3"), &owner, &mallory, TTL).await.unwrap(), Binding::Owner, "an ended session frees its slot");
    assert!(is_caller_full(store.bind(&session("contract:m4"), &owner, &mallory, TTL).await.unwrap(), TTL * 2));
}

/// Among `n` concurrent binds of distinct sessions by one caller that may hold `max`, exactly
/// `max` are bound.
pub async fn concurrent_binds_of_one_caller_admit_exactly_its_bound(store: Arc<dyn SessionStore>, n: usize, max: usize) {
    let bound = CallerBound::new(CallerKey::agent("contract-racer"), max);
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store.bind(&session(&format!("contract:race-bound-{i}")), &OwnerKey::of(Some("racer"), None, None), &bound, TTL).await.unwrap()
            })
        })
        .collect();
    let (mut bound_ok, mut full) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Binding::Owner => bound_ok += 1,
            Binding::CallerFull(_) => full += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((bound_ok, full), (max, n - max));
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
    // A caller with one slot: its session keeps the slot while used, and frees it once idle.
    let one = CallerBound::new(CallerKey::agent("contract-one-slot"), 1);
    store.bind(&s, &alice(), &one, ttl).await.unwrap();
    assert!(is_caller_full(store.bind(&session("contract:idle-2"), &alice(), &one, ttl).await.unwrap(), ttl * 2));
    advance(step).await;
    assert_eq!(store.verify(&s, &alice(), ttl).await.unwrap(), Binding::Owner, "used within its lifetime");
    advance(step).await;
    assert_eq!(store.verify(&s, &alice(), ttl).await.unwrap(), Binding::Owner, "the use restarted the lifetime");
    assert!(is_caller_full(store.bind(&session("contract:idle-2"), &alice(), &one, ttl).await.unwrap(), ttl * 2), "a used session keeps its slot");
    advance(ttl + step).await;
    assert_eq!(store.verify(&s, &alice(), ttl).await.unwrap(), Binding::Unbound, "idle past its lifetime");
    assert_eq!(store.bind(&s, &bob(), &roomy(), ttl).await.unwrap(), Binding::Owner, "an expired binding holds nothing");
    assert_eq!(store.bind(&session("contract:idle-2"), &alice(), &one, ttl).await.unwrap(), Binding::Owner, "an idle session frees its slot");
}

/// Every case above but the expiry (which needs the store's clock) against one shared store.
pub async fn every_case_but_expiry(store: Arc<dyn SessionStore>) {
    a_session_belongs_to_the_owner_that_bound_it(store.as_ref()).await;
    unknown_sessions_are_unbound_and_sessions_are_independent(store.as_ref()).await;
    only_the_owner_unbinds(store.as_ref()).await;
    each_caller_is_bounded_and_others_are_unaffected(store.as_ref()).await;
    concurrent_binds_of_one_caller_admit_exactly_its_bound(store.clone(), 50, 7).await;
    concurrent_binds_have_exactly_one_winner(store, 100).await;
}
