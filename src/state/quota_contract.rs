//! The quota store contract: every function takes `&dyn QuotaStore`, so the Redis store runs
//! the same suite. Each test uses its own keys and injected times.
use super::*;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

fn at(secs: u64) -> UnixTime {
    UnixTime(Duration::from_secs(1_784_980_800 + secs))
}

/// N spends fit, the N+1th is refused with the time until one unit refills.
pub(crate) async fn limit_n_allows_n_then_refuses(store: &dyn QuotaStore) {
    for i in 0..5 {
        let out = store.spend("contract:count", 1, 5, HOUR, at(0)).await.expect("store answers");
        assert_eq!(out, QuotaOutcome::Spent { remaining: 4 - i }, "spend {i}");
    }
    let out = store.spend("contract:count", 1, 5, HOUR, at(0)).await.expect("store answers");
    assert_eq!(out, QuotaOutcome::Exhausted { retry_after: Duration::from_secs(720) });
    // Exactly one emission interval later, one more unit fits.
    let out = store.spend("contract:count", 1, 5, HOUR, at(720)).await.expect("store answers");
    assert_eq!(out, QuotaOutcome::Spent { remaining: 0 });
}

/// Costs are amounts: 500 per day, 400 then 100 fit, then 1 is refused.
pub(crate) async fn cost_is_counted_as_an_amount(store: &dyn QuotaStore) {
    assert!(matches!(store.spend("contract:usd", 400, 500, DAY, at(0)).await, Ok(QuotaOutcome::Spent { remaining: 100 })));
    // 200 does not fit and records nothing: 100 still does.
    let out = store.spend("contract:usd", 200, 500, DAY, at(0)).await.expect("store answers");
    let QuotaOutcome::Exhausted { retry_after } = out else { panic!("200 more should not fit: {out:?}") };
    assert_eq!(retry_after, Duration::from_secs(86_400 * 100 / 500));
    assert!(matches!(store.spend("contract:usd", 100, 500, DAY, at(0)).await, Ok(QuotaOutcome::Spent { remaining: 0 })));
    assert!(matches!(store.spend("contract:usd", 1, 500, DAY, at(0)).await, Ok(QuotaOutcome::Exhausted { .. })));
    // A cost larger than the whole limit never fits.
    assert!(matches!(store.spend("contract:usd-big", 501, 500, DAY, at(0)).await, Ok(QuotaOutcome::Exhausted { .. })));
}

/// Keys are independent buckets.
pub(crate) async fn keys_are_independent(store: &dyn QuotaStore) {
    assert!(matches!(store.spend("contract:a", 1, 1, HOUR, at(0)).await, Ok(QuotaOutcome::Spent { .. })));
    assert!(matches!(store.spend("contract:a", 1, 1, HOUR, at(0)).await, Ok(QuotaOutcome::Exhausted { .. })));
    assert!(matches!(store.spend("contract:b", 1, 1, HOUR, at(0)).await, Ok(QuotaOutcome::Spent { .. })));
}

/// A refund gives the units back, never beyond full.
pub(crate) async fn refund_restores_units(store: &dyn QuotaStore) {
    assert!(matches!(store.spend("contract:r", 2, 2, HOUR, at(0)).await, Ok(QuotaOutcome::Spent { remaining: 0 })));
    store.refund("contract:r", 1, 2, HOUR, at(0)).await.expect("refund");
    assert!(matches!(store.spend("contract:r", 1, 2, HOUR, at(0)).await, Ok(QuotaOutcome::Spent { remaining: 0 })));
    store.refund("contract:fresh", 5, 2, HOUR, at(0)).await.expect("refund of nothing");
    assert!(matches!(store.spend("contract:fresh", 3, 2, HOUR, at(0)).await, Ok(QuotaOutcome::Exhausted { .. })));
}

/// Concurrent spends on one key count exactly `limit`.
pub(crate) async fn concurrent_spends_count_exactly(store: std::sync::Arc<dyn QuotaStore>) {
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move { s.spend("contract:race", 1, 20, HOUR, at(0)).await }));
    }
    let mut spent = 0;
    for t in tasks {
        if matches!(t.await.expect("task"), Ok(QuotaOutcome::Spent { .. })) {
            spent += 1;
        }
    }
    assert_eq!(spent, 20);
}

#[tokio::test]
async fn memory_store_meets_the_contract() {
    let store = MemoryQuotaStore::new(1000);
    limit_n_allows_n_then_refuses(&store).await;
    cost_is_counted_as_an_amount(&store).await;
    keys_are_independent(&store).await;
    refund_restores_units(&store).await;
    concurrent_spends_count_exactly(std::sync::Arc::new(MemoryQuotaStore::new(1000))).await;
}

#[tokio::test]
async fn memory_store_drops_expired_buckets_and_refuses_beyond_max_keys() {
    let store = MemoryQuotaStore::new(2);
    for k in ["k1", "k2"] {
        assert!(matches!(store.spend(k, 1, 10, HOUR, at(0)).await, Ok(QuotaOutcome::Spent { .. })));
    }
    // Full of live buckets: a new key fails closed rather than evicting spent quota.
    let err = store.spend("k3", 1, 10, HOUR, at(1)).await.expect_err("full");
    assert!(err.to_string().contains("maximum of 2"), "{err}");
    // Once the old buckets have refilled (one unit = 360 s), they are dropped and k3 fits.
    assert!(matches!(store.spend("k3", 1, 10, HOUR, at(400)).await, Ok(QuotaOutcome::Spent { .. })));
    assert_eq!(store.len(), 1);
}

/// Every case above against one shared store (keys of one run do not collide).
pub(crate) async fn every_case(store: std::sync::Arc<dyn QuotaStore>) {
    limit_n_allows_n_then_refuses(store.as_ref()).await;
    cost_is_counted_as_an_amount(store.as_ref()).await;
    keys_are_independent(store.as_ref()).await;
    refund_restores_units(store.as_ref()).await;
    concurrent_spends_count_exactly(store).await;
}
