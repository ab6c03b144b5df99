//! Quota buckets on Redis (stage 10): one string per bucket (`prefix + "quota:" + key`) holding
//! the GCRA's theoretical arrival time, read, decided and written by one Lua script, so a spend
//! is counted exactly once across every instance sharing the Redis. Each key lives until its
//! bucket would be full again, so Redis memory stays bounded.

use std::time::Duration;

use super::RedisStore;
use crate::state::quota::{QuotaOutcome, QuotaStore};
use crate::state::StoreError;
use portcullis_wire::UnixTime;

/// GCRA over Redis, the same arithmetic as the memory store (`state::quota::gcra`) in
/// microseconds (Lua numbers are doubles: exact to 2^53 µs, far past any Unix time in use).
/// One script run per spend, so the read-decide-write is atomic across every instance.
/// KEYS[1] = bucket; ARGV = now_us, increment_us, per_us, unit_us, "spend" | "refund".
/// Returns {1, remaining} when counted, {0, wait_us} when exhausted, {1, 0} after a refund.
const GCRA_LUA: &str = r"
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local now = tonumber(ARGV[1])
local inc = tonumber(ARGV[2])
local per = tonumber(ARGV[3])
if ARGV[5] == 'refund' then
  local back = tat - inc
  if back <= now then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], string.format('%d', back), 'PX', math.ceil((back - now) / 1000))
  end
  return {1, 0}
end
local new_tat = math.max(tat, now) + inc
local allowed_at = new_tat - per
if allowed_at > now then
  return {0, allowed_at - now}
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.max(1, math.ceil((new_tat - now) / 1000)))
return {1, math.floor((now + per - new_tat) / tonumber(ARGV[4]))}
";

fn micros_ceil(d: u128) -> u64 {
    u64::try_from(d.div_ceil(1000)).unwrap_or(u64::MAX)
}

/// The GCRA's arguments for `cost` units of `limit` per `per`, in µs: the increment, the period
/// and one unit (shared by the quota script and the admission script).
pub(super) fn gcra_args(cost: u64, limit: u64, per: Duration) -> (u64, u64, u64) {
    let per_ns = per.as_nanos();
    let increment = micros_ceil((per_ns * u128::from(cost)).div_ceil(u128::from(limit.max(1))));
    let unit = micros_ceil(per_ns.div_ceil(u128::from(limit.max(1)))).max(1);
    (increment, micros_ceil(per_ns), unit)
}

impl RedisStore {
    async fn gcra(&self, key: &str, cost: u64, limit: u64, per: Duration, now: UnixTime, mode: &str) -> Result<(i64, i64), StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| redis::Script::new(GCRA_LUA));
        let (increment, per_us, unit) = gcra_args(cost, limit, per);
        let now_us = u64::try_from(now.0.as_micros()).unwrap_or(u64::MAX);
        let bucket = self.key("quota", key);
        let mut inv = script.key(bucket);
        inv.arg(now_us).arg(increment).arg(per_us).arg(unit).arg(mode);
        let reply: Vec<i64> = self.script(&inv).await?;
        match reply.as_slice() {
            [a, b] => Ok((*a, *b)),
            other => Err(self.unavailable(format!("unexpected quota script reply {other:?}"))),
        }
    }
}

#[async_trait::async_trait]
impl QuotaStore for RedisStore {
    async fn spend(&self, key: &str, cost: u64, limit: u64, per: Duration, now: UnixTime) -> Result<QuotaOutcome, StoreError> {
        match self.gcra(key, cost, limit, per, now, "spend").await? {
            (1, remaining) => Ok(QuotaOutcome::Spent { remaining: u64::try_from(remaining).unwrap_or(0).min(limit) }),
            (_, wait_us) => Ok(QuotaOutcome::Exhausted { retry_after: Duration::from_micros(u64::try_from(wait_us).unwrap_or(1).max(1)) }),
        }
    }

    async fn refund(&self, key: &str, cost: u64, limit: u64, per: Duration, now: UnixTime) -> Result<(), StoreError> {
        self.gcra(key, cost, limit, per, now, "refund").await.map(|_| ())
    }
}

/// The quota contract against a real redis-server on loopback.
#[cfg(test)]
mod contract_tests {
    use super::super::contract_tests::store;
    use super::super::redis_server;
    use super::*;

    #[tokio::test]
    async fn redis_store_meets_the_quota_contract() {
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        crate::state::quota::contract::every_case(s).await;
    }

    #[tokio::test]
    async fn quota_keys_carry_a_ttl_so_redis_memory_stays_bounded() {
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        let now = UnixTime(Duration::from_secs(1_784_980_800));
        s.spend("ttl", 1, 10, Duration::from_secs(60), now).await.expect("spend");
        let ttl: i64 = s.query(redis::cmd("PTTL").arg(s.key("quota", "ttl"))).await.expect("pttl");
        // One unit of a 10-per-minute bucket refills in 6 s: the key lives that long, no more.
        assert!((5_000..=6_000).contains(&ttl), "{ttl}");
    }
}
