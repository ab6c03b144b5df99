//! The contract every [`JournalStore`] must meet, written once as functions over `&dyn
//! JournalStore` so the memory store and the Redis store (on loopback) run the same suite.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Entry, JournalStore, RecordedAnswer, Reserve, Ticket};
use crate::state::caller::{CallerBound, CallerKey};

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn ticket(key: &str, fingerprint: u8, token: &str) -> Ticket {
    Ticket {
        key: format!("contract:{key}"),
        fingerprint: [fingerprint; 32],
        token: token.to_owned(),
        bound: CallerBound::new(CallerKey::agent("contract"), 1_000),
    }
}

/// A ticket of `caller`, who may hold `max` entries.
fn ticket_of(caller: &str, max: usize, key: &str, token: &str) -> Ticket {
    Ticket { bound: CallerBound::new(CallerKey::agent(caller), max), ..ticket(key, 1, token) }
}

fn is_caller_full(r: &Reserve, at_most: Duration) -> bool {
    matches!(r, Reserve::CallerFull(f) if !f.retry_after.is_zero() && f.retry_after <= at_most)
}

fn answer(text: &str) -> RecordedAnswer {
    RecordedAnswer {
        status: 200,
        content_type: Some("application/json".into()),
        body: Bytes::from(format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"{text}"}}}}"#)),
        id: Some("1".into()),
        progress_token: None,
    }
}

/// The first reservation of a key wins; later ones see it in flight, then recorded, with the
/// fingerprint of the call that made it.
pub async fn first_use_reserves_and_others_see_the_entry(store: &dyn JournalStore) {
    let first = ticket("a", 1, "t1");
    assert_eq!(store.reserve(&first, MINUTE).await.unwrap(), Reserve::Reserved);
    assert_eq!(store.reserve(&ticket("a", 1, "t2"), MINUTE).await.unwrap(), Reserve::Taken(Entry::InFlight { fingerprint: [1; 32] }));
    assert_eq!(
        store.reserve(&ticket("a", 2, "t3"), MINUTE).await.unwrap(),
        Reserve::Taken(Entry::InFlight { fingerprint: [1; 32] }),
        "another fingerprint sees the first call's"
    );
    assert!(store.complete(&first, &answer("paid"), DAY).await.unwrap());
    let Reserve::Taken(Entry::Recorded { fingerprint, answer: got }) = store.reserve(&ticket("a", 1, "t4"), MINUTE).await.unwrap() else {
        panic!("recorded entry expected");
    };
    assert_eq!((fingerprint, got.as_ref()), ([1; 32], &answer("paid")));
}

/// Only the ticket that reserved a key records an answer for it or releases it.
pub async fn only_the_holder_records_or_releases(store: &dyn JournalStore) {
    let holder = ticket("b", 1, "holder");
    let other = ticket("b", 1, "other");
    assert_eq!(store.reserve(&holder, MINUTE).await.unwrap(), Reserve::Reserved);
    assert!(!store.complete(&other, &answer("forged"), DAY).await.unwrap());
    assert!(!store.release(&other).await.unwrap());
    assert!(store.complete(&holder, &answer("real"), DAY).await.unwrap());
    assert!(!store.release(&holder).await.unwrap(), "a recorded answer is not released");
    assert!(!store.complete(&holder, &answer("twice"), DAY).await.unwrap(), "an answer is recorded once");
    let Reserve::Taken(Entry::Recorded { answer: got, .. }) = store.reserve(&other, MINUTE).await.unwrap() else { panic!("recorded") };
    assert_eq!(got.as_ref(), &answer("real"));
    assert!(!store.release(&ticket("never-reserved", 1, "x")).await.unwrap());
}

/// After a release the key is free: the next call reserves it.
pub async fn a_released_key_can_be_reserved_again(store: &dyn JournalStore) {
    let first = ticket("c", 1, "t1");
    assert_eq!(store.reserve(&first, MINUTE).await.unwrap(), Reserve::Reserved);
    assert!(store.release(&first).await.unwrap());
    assert!(!store.complete(&first, &answer("late"), DAY).await.unwrap(), "a released ticket records nothing");
    assert_eq!(store.reserve(&ticket("c", 2, "t2"), MINUTE).await.unwrap(), Reserve::Reserved);
}

/// Keys never affect each other, including keys that share a prefix.
pub async fn keys_are_independent(store: &dyn JournalStore) {
    for k in ["d", "d2", "d:x", ""] {
        assert_eq!(store.reserve(&ticket(k, 1, "t"), MINUTE).await.unwrap(), Reserve::Reserved, "{k:?}");
    }
}

/// Among `n` concurrent reservations of one key, exactly one reserves it.
pub async fn concurrent_reservations_admit_exactly_one(store: Arc<dyn JournalStore>, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move { s.reserve(&ticket("race", 1, &format!("t{i}")), MINUTE).await.unwrap() == Reserve::Reserved })
        })
        .collect();
    let mut reserved = 0;
    for t in tasks {
        reserved += usize::from(t.await.unwrap());
    }
    assert_eq!(reserved, 1, "exactly one of {n} concurrent reservations wins");
}

/// Decision 13: a caller at its bound reserves no new key (and is told when its first entry
/// leaves) while every other caller goes on; its own live entries still answer it; an entry
/// released or recorded keeps the count right.
pub async fn each_caller_is_bounded_and_others_are_unaffected(store: &dyn JournalStore) {
    let mallory = |k: &str, t: &str| ticket_of("mallory", 3, &format!("bound-m-{k}"), t);
    for k in ["1", "2", "3"] {
        assert_eq!(store.reserve(&mallory(k, k), MINUTE).await.unwrap(), Reserve::Reserved, "{k}");
    }
    let over = store.reserve(&mallory("4", "4"), MINUTE).await.unwrap();
    assert!(is_caller_full(&over, MINUTE), "a fourth key is over the bound: {over:?}");
    assert_eq!(store.reserve(&ticket_of("alice", 3, "bound-a-1", "a"), MINUTE).await.unwrap(), Reserve::Reserved, "another caller is unaffected");
    assert_eq!(
        store.reserve(&mallory("1", "again"), MINUTE).await.unwrap(),
        Reserve::Taken(Entry::InFlight { fingerprint: [1; 32] }),
        "its own keys still answer"
    );
    assert!(store.complete(&mallory("2", "2"), &answer("kept"), DAY).await.unwrap());
    assert!(
        matches!(store.reserve(&mallory("2", "retry"), MINUTE).await.unwrap(), Reserve::Taken(Entry::Recorded { .. })),
        "a recorded answer is replayed at the bound"
    );
    assert!(store.release(&mallory("1", "1")).await.unwrap());
    assert_eq!(store.reserve(&mallory("4", "4"), MINUTE).await.unwrap(), Reserve::Reserved, "a released key frees its slot");
    let over = store.reserve(&mallory("5", "5"), MINUTE).await.unwrap();
    assert!(is_caller_full(&over, MINUTE), "full again; the in-flight entries leave first: {over:?}");
}

/// Among `n` concurrent reservations of distinct keys by one caller that may hold `max`,
/// exactly `max` reserve (the count and the insert are one step).
pub async fn concurrent_reservations_of_one_caller_admit_exactly_its_bound(store: Arc<dyn JournalStore>, n: usize, max: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move { s.reserve(&ticket_of("racer", max, &format!("race-bound-{i}"), "t"), MINUTE).await.unwrap() })
        })
        .collect();
    let (mut reserved, mut full) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Reserve::Reserved => reserved += 1,
            Reserve::CallerFull(_) => full += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((reserved, full), (max, n - max), "exactly the bound of {n} concurrent first uses");
}

/// An in-flight entry lives `in_flight_ttl`, a recorded one `ttl`; after that the key is free.
/// `sleep` lets time pass (real time on Redis, a manual clock in memory).
pub async fn entries_expire_after_their_ttl<F, Fut>(store: &dyn JournalStore, ttl: Duration, sleep: F)
where
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    let step = ttl.mul_f64(0.6);
    // A caller whose one slot is taken gets it back when the entry expires.
    assert_eq!(store.reserve(&ticket_of("one-slot", 1, "ttl-slot-1", "t"), ttl).await.unwrap(), Reserve::Reserved);
    assert!(is_caller_full(&store.reserve(&ticket_of("one-slot", 1, "ttl-slot-2", "t"), ttl).await.unwrap(), ttl));
    let pending = ticket("ttl-pending", 1, "t1");
    assert_eq!(store.reserve(&pending, ttl).await.unwrap(), Reserve::Reserved);
    let recorded = ticket("ttl-recorded", 1, "t1");
    assert_eq!(store.reserve(&recorded, ttl).await.unwrap(), Reserve::Reserved);
    assert!(store.complete(&recorded, &answer("kept"), ttl).await.unwrap());
    sleep(step).await;
    assert!(matches!(store.reserve(&ticket("ttl-recorded", 1, "t2"), ttl).await.unwrap(), Reserve::Taken(Entry::Recorded { .. })), "still live");
    sleep(step).await;
    assert_eq!(store.reserve(&ticket("ttl-pending", 1, "t2"), ttl).await.unwrap(), Reserve::Reserved, "an abandoned reservation expires");
    assert_eq!(store.reserve(&ticket("ttl-recorded", 1, "t3"), ttl).await.unwrap(), Reserve::Reserved, "a recorded answer expires");
    assert!(!store.complete(&pending, &answer("too late"), ttl).await.unwrap(), "an expired ticket records nothing");
    assert_eq!(store.reserve(&ticket_of("one-slot", 1, "ttl-slot-2", "t"), ttl).await.unwrap(), Reserve::Reserved, "an expired entry frees its slot");
}

/// Every case above but the expiry (which needs the store's clock) against one shared store.
pub async fn every_case_but_expiry(store: Arc<dyn JournalStore>) {
    first_use_reserves_and_others_see_the_entry(store.as_ref()).await;
    only_the_holder_records_or_releases(store.as_ref()).await;
    a_released_key_can_be_reserved_again(store.as_ref()).await;
    keys_are_independent(store.as_ref()).await;
    each_caller_is_bounded_and_others_are_unaffected(store.as_ref()).await;
    concurrent_reservations_of_one_caller_admit_exactly_its_bound(store.clone(), 50, 7).await;
    concurrent_reservations_admit_exactly_one(store, 100).await;
}
