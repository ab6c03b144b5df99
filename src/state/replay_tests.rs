use std::sync::Mutex as StdMutex;

use super::*;

/// A clock the test moves by hand.
fn manual_clock() -> (Clock, Arc<StdMutex<Instant>>) {
    let t = Arc::new(StdMutex::new(Instant::now()));
    let t2 = t.clone();
    (Arc::new(move || *t2.lock().unwrap_or_else(|p| p.into_inner())), t)
}

fn advance(t: &StdMutex<Instant>, by: Duration) {
    let mut g = t.lock().unwrap_or_else(|p| p.into_inner());
    *g += by;
}

#[tokio::test]
async fn memory_store_meets_the_replay_contract() {
    super::contract::every_case(Arc::new(MemoryReplayStore::new(1000))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_admits_one_of_many_concurrent_uses_on_threads() {
    super::contract::concurrent_first_uses_admit_exactly_one(Arc::new(MemoryReplayStore::new(1000)), 200).await;
}

#[tokio::test]
async fn expired_record_can_be_used_again() {
    let (clock, t) = manual_clock();
    let store = MemoryReplayStore::with_clock(10, clock);
    assert!(store.first_use("k", Duration::from_secs(30)).await.expect("store answers"));
    advance(&t, Duration::from_secs(29));
    assert!(!store.first_use("k", Duration::from_secs(30)).await.expect("store answers"), "still live at 29 s");
    advance(&t, Duration::from_secs(2));
    assert!(store.first_use("k", Duration::from_secs(30)).await.expect("store answers"), "expired at 31 s");
}

#[tokio::test]
async fn full_store_refuses_new_keys_instead_of_forgetting_live_ones() {
    let (clock, _t) = manual_clock();
    let store = MemoryReplayStore::with_clock(3, clock);
    for k in ["a", "b", "c"] {
        assert!(store.first_use(k, Duration::from_secs(60)).await.expect("room left"));
    }
    let err = store.first_use("d", Duration::from_secs(60)).await.expect_err("full");
    assert!(err.to_string().contains("full"), "{err}");
    // The live records are still there: a replay is still detected.
    assert!(!store.first_use("a", Duration::from_secs(60)).await.expect("known key answers"));
    assert_eq!(store.len(), 3);
}

#[tokio::test]
async fn full_store_makes_room_by_sweeping_expired_records() {
    let (clock, t) = manual_clock();
    let store = MemoryReplayStore::with_clock(2, clock);
    assert!(store.first_use("short", Duration::from_secs(1)).await.expect("room"));
    assert!(store.first_use("long", Duration::from_secs(600)).await.expect("room"));
    advance(&t, Duration::from_secs(2));
    assert!(store.first_use("new", Duration::from_secs(60)).await.expect("expired record swept"));
    assert_eq!(store.len(), 2);
    assert!(!store.first_use("long", Duration::from_secs(60)).await.expect("answers"));
}

#[tokio::test]
async fn shards_sweep_themselves_as_they_grow() {
    let (clock, t) = manual_clock();
    let store = MemoryReplayStore::with_clock(1_000_000, clock);
    for i in 0..5_000 {
        assert!(store.first_use(&format!("old-{i}"), Duration::from_secs(1)).await.expect("room"));
    }
    advance(&t, Duration::from_secs(5));
    for i in 0..5_000 {
        assert!(store.first_use(&format!("new-{i}"), Duration::from_secs(60)).await.expect("room"));
    }
    assert!(store.len() < 10_000, "expired records were swept while inserting: {}", store.len());
}

#[tokio::test]
async fn absurd_ttl_is_an_error_not_a_pass() {
    let store = MemoryReplayStore::new(10);
    assert!(store.first_use("k", Duration::MAX).await.is_err());
}
