//! Admission on one Redis server (see [`crate::state::admit`]): a signature's replay records
//! and its quotas, checked and written by one Lua script.

use std::time::Duration;

use async_trait::async_trait;

use super::RedisStore;
use crate::state::admit::{Admission, AdmitStore, ReplayKeys};
use crate::state::quota::QuotaSpec;
use crate::state::StoreError;
use portcullis_wire::UnixTime;

/// KEYS = the signature's record, its nonce's record when ARGV[2] = "1", then one bucket per
/// quota. ARGV[1] = replay lifetime in ms, ARGV[2] = "1" | "0", ARGV[3] = now in µs, then per
/// quota its increment and period in µs (the GCRA of `state::redis::quota`). A bucket named twice is
/// spent twice, as stage 10 would. Returns {0} replayed, {2, i, wait_us} quota i (0-based)
/// exhausted, {1} admitted.
const ADMIT_LUA: &str = r"
if not redis.call('SET', KEYS[1], 1, 'NX', 'PX', ARGV[1]) then return {0} end
local q = 2
if ARGV[2] == '1' then
  if not redis.call('SET', KEYS[2], 1, 'NX', 'PX', ARGV[1]) then return {0} end
  q = 3
end
local now = tonumber(ARGV[3])
local tats = {}
local order = {}
for i = q, #KEYS do
  local j = 4 + 2 * (i - q)
  local inc = tonumber(ARGV[j])
  local per = tonumber(ARGV[j + 1])
  local key = KEYS[i]
  local tat = tats[key]
  if tat == nil then tat = tonumber(redis.call('GET', key) or '0') end
  local new_tat = math.max(tat, now) + inc
  if new_tat - per > now then return {2, i - q, new_tat - per - now} end
  if tats[key] == nil then table.insert(order, key) end
  tats[key] = new_tat
end
for _, key in ipairs(order) do
  local tat = tats[key]
  redis.call('SET', key, string.format('%d', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
end
return {1}
";

#[async_trait]
impl AdmitStore for RedisStore {
    async fn admit(&self, replay: &ReplayKeys, quotas: &[QuotaSpec], now: UnixTime) -> Result<Admission, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| redis::Script::new(ADMIT_LUA));
        let mut inv = script.key(self.key("replay", &replay.first));
        if let Some(then) = &replay.then {
            inv.key(self.key("replay", then));
        }
        let ttl_ms = u64::try_from(replay.ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        inv.arg(ttl_ms).arg(if replay.then.is_some() { "1" } else { "0" }).arg(u64::try_from(now.0.as_micros()).unwrap_or(u64::MAX));
        for q in quotas {
            let (increment, per, _unit) = super::quota::gcra_args(q.cost, q.limit, q.per);
            inv.key(self.key("quota", &q.key));
            inv.arg(increment).arg(per);
        }
        let reply: Vec<i64> = self.script(&inv).await?;
        match reply.as_slice() {
            [1] => Ok(Admission::Admitted),
            [0] => Ok(Admission::Replayed),
            [2, i, wait] => Ok(Admission::Exhausted {
                index: usize::try_from(*i).unwrap_or(0),
                retry_after: Duration::from_micros(u64::try_from(*wait).unwrap_or(1).max(1)),
            }),
            other => Err(StoreError::Unavailable { store: self.label().to_owned(), reason: format!("unexpected admission script reply {other:?}") }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::contract_tests::store_with_prefix;
    use super::super::redis_server;
    use super::*;
    use crate::state::quota::QuotaStore;
    use crate::state::replay::ReplayStore;

    fn keys(n: &str) -> ReplayKeys {
        ReplayKeys { first: format!("sig:{{{n}}}:k:s"), then: Some(format!("nonce:{{{n}}}:k")), ttl: Duration::from_secs(60) }
    }

    fn quota(key: &str, limit: u64) -> QuotaSpec {
        QuotaSpec { key: key.into(), cost: 1, limit, per: Duration::from_secs(3600), global: false }
    }

    const NOW: UnixTime = UnixTime(Duration::from_secs(1_784_980_800));

    /// The same answers as stage 6 then stage 10, in one script.
    #[tokio::test]
    async fn admission_answers_as_replay_then_quota() {
        let server = redis_server::RedisServer::start();
        let s = store_with_prefix(&server, &format!("admit-{}:", uuid::Uuid::new_v4()));
        assert_eq!(s.admit(&keys("a"), &[quota("q", 2)], NOW).await, Ok(Admission::Admitted));
        // The same signature again: replayed, and the quota is not spent by it.
        assert_eq!(s.admit(&keys("a"), &[quota("q", 2)], NOW).await, Ok(Admission::Replayed));
        assert_eq!(s.admit(&keys("b"), &[quota("q", 2)], NOW).await, Ok(Admission::Admitted), "one unit was left");
        // Exhausted: refused, but the signature is recorded (as stage 6 records it first).
        assert!(matches!(s.admit(&keys("c"), &[quota("q", 2)], NOW).await, Ok(Admission::Exhausted { index: 0, .. })));
        assert_eq!(s.first_use(&keys("c").first, Duration::from_secs(60)).await, Ok(false));
        // A reused nonce with new signature bytes is a replay.
        let reused = ReplayKeys { first: "sig:{a}:k:other".into(), ..keys("a") };
        assert_eq!(s.admit(&reused, &[], NOW).await, Ok(Admission::Replayed));
        // All or none: the roomy bucket is not spent when the tight one refuses.
        assert!(matches!(s.admit(&keys("d"), &[quota("roomy", 10), quota("q", 2)], NOW).await, Ok(Admission::Exhausted { index: 1, .. })));
        for _ in 0..10 {
            assert!(matches!(s.spend("roomy", 1, 10, Duration::from_secs(3600), NOW).await, Ok(crate::state::quota::QuotaOutcome::Spent { .. })));
        }
        // A bucket named twice is spent twice.
        assert!(matches!(s.admit(&keys("e"), &[quota("twice", 1), quota("twice", 1)], NOW).await, Ok(Admission::Exhausted { index: 1, .. })));
        assert_eq!(s.admit(&keys("f"), &[quota("twice", 1)], NOW).await, Ok(Admission::Admitted), "nothing was spent");
        // Without a nonce, without quotas.
        let single = ReplayKeys { first: "sig:{g}:k".into(), then: None, ttl: Duration::from_secs(60) };
        assert_eq!(s.admit(&single, &[], NOW).await, Ok(Admission::Admitted));
        assert_eq!(s.admit(&single, &[], NOW).await, Ok(Admission::Replayed));
    }

    #[tokio::test]
    async fn concurrent_copies_are_admitted_once_and_spend_once() {
        let server = redis_server::RedisServer::start();
        let s = store_with_prefix(&server, &format!("admit-race-{}:", uuid::Uuid::new_v4()));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let s: Arc<dyn AdmitStore> = s.clone();
                tokio::spawn(async move { s.admit(&keys("race"), &[quota("race", 100)], NOW).await.unwrap() })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            admitted += usize::from(t.await.unwrap() == Admission::Admitted);
        }
        assert_eq!(admitted, 1);
        // 100 per hour, one spent: 99 more fit, the 100th does not.
        for i in 0..99 {
            assert_eq!(s.admit(&keys(&format!("r{i}")), &[quota("race", 100)], NOW).await, Ok(Admission::Admitted));
        }
        assert!(matches!(s.admit(&keys("last"), &[quota("race", 100)], NOW).await, Ok(Admission::Exhausted { .. })));
    }
}
