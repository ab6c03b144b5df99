//! Replay records on Redis (stage 6): one key per record (`prefix + "replay:" + key`), written
//! with `SET NX PX`, so exactly one use is the first across every instance sharing the Redis.
//! Every record carries the signature's lifetime as TTL, so Redis memory stays bounded.

use std::time::Duration;

use super::{millis, RedisStore};
use crate::state::replay::ReplayStore;
use crate::state::StoreError;

/// Two replay records in one round trip, answering as two `SET NX PX` in turn would.
/// KEYS[1] = first, KEYS[2] = then (one hash slot: the caller tags both alike); ARGV[1] = ms.
/// 1 = both recorded now; 0 = the first was already recorded (nothing written), or the second
/// was (the first is recorded).
const FIRST_USE_THEN_LUA: &str = r"
if not redis.call('SET', KEYS[1], 1, 'NX', 'PX', ARGV[1]) then return 0 end
if not redis.call('SET', KEYS[2], 1, 'NX', 'PX', ARGV[1]) then return 0 end
return 1
";

#[async_trait::async_trait]
impl ReplayStore for RedisStore {
    /// `SET prefix:replay:<key> 1 NX PX ttl`: exactly one first use across every instance.
    async fn first_use(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.set_once(&self.key("replay", key), ttl).await
    }

    /// A signature with a nonce: both records in one script (one round trip, not two).
    async fn first_use_then(&self, first: &str, then: Option<&str>, ttl: Duration) -> Result<bool, StoreError> {
        let Some(then) = then else { return self.first_use(first, ttl).await };
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| redis::Script::new(FIRST_USE_THEN_LUA));
        let mut inv = script.key(self.key("replay", first));
        inv.key(self.key("replay", then)).arg(millis(ttl));
        Ok(self.script::<i64>(&inv).await? == 1)
    }
}

/// The replay contract against a real redis-server on loopback.
#[cfg(test)]
mod contract_tests {
    use super::super::contract_tests::store;
    use super::super::redis_server;
    use super::*;

    #[tokio::test]
    async fn redis_store_meets_the_replay_contract() {
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        crate::state::replay::contract::every_case(s).await;
    }

    #[tokio::test]
    async fn replay_keys_carry_the_records_lifetime() {
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        s.first_use("r", Duration::from_secs(30)).await.expect("first use");
        let ttl: i64 = s.query(redis::cmd("PTTL").arg(s.key("replay", "r"))).await.expect("pttl");
        assert!((29_000..=30_000).contains(&ttl), "{ttl}");
    }
}
