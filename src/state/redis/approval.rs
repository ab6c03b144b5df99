//! Approval records on Redis: one hash per binding (`prefix + "{approval}:" + binding key`,
//! fields `state`, `code`, `exp`, `by`, `rec`) and one string per code pointing at it
//! (`prefix + "{approval}-code:" + SHA-256(code)`). Every operation is one Lua script, so an
//! approval is consumed once across every instance sharing the Redis. Both keys carry the
//! link's lifetime as TTL, so Redis memory stays bounded.
//!
//! Each caller's pending records are counted in a sorted set in the same slot
//! (`prefix + "{approval}-caller:" + caller digest`, binding keys scored by expiry in Unix s):
//! ASK trims, counts and adds in the same script that stores the record, so a caller's bound
//! (`approvals.max_pending_per_caller`) holds exactly across instances; DECIDE removes the
//! binding from the set named in its hash (`caller`).
//!
//! The `{approval}` hash tag puts every approval key in one Redis Cluster slot: a script reads a
//! code's key and then its binding's, which must live on the same node. Approvals come at the
//! pace of people pressing a button, so one slot is not a bottleneck.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use super::script;
use super::RedisStore;
use crate::state::approval::{ApprovalRecord, ApprovalStore, Ask, BindingKey, Choice};
use crate::state::caller::{CallerBound, CallerFull};
use crate::state::StoreError;
use portcullis_wire::UnixTime;

/// ASK: KEYS[1] = binding, KEYS[2] = the fresh code's key, KEYS[3] = the caller's set;
/// ARGV[1] = fresh code, ARGV[2] = fresh record, ARGV[3] = its expiry (unix s), ARGV[4] =
/// lifetime in ms, ARGV[5] = now (unix s), ARGV[6] = the caller's bound.
/// Returns {"pending", rec} | {"denied", rec} | {"approved", rec, by} (consumed) | {"issued"} |
/// {"full", seconds until the caller's first pending record expires}.
const ASK_LUA: &str = r"
local now = tonumber(ARGV[5])
local f = redis.call('HMGET', KEYS[1], 'state', 'exp', 'rec', 'by')
if f[1] and tonumber(f[2]) > now then
  if f[1] == 'pending' or f[1] == 'denied' then return {f[1], f[3]} end
  if f[1] == 'approved' then
    redis.call('DEL', KEYS[1])
    return {'approved', f[3], f[4]}
  end
end
if not redis.call('ZSCORE', KEYS[3], KEYS[1]) then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    return {'full', tostring(math.max(1, tonumber(first[2]) - now))}
  end
end
redis.call('ZADD', KEYS[3], ARGV[3], KEYS[1])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[3], math.max(1, tonumber(last[2]) - now) * 1000)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'state', 'pending', 'code', ARGV[1], 'exp', ARGV[3], 'rec', ARGV[2], 'caller', KEYS[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], KEYS[1], 'PX', ARGV[4])
return {'issued'}
";

/// PENDING: KEYS[1] = the code's key; ARGV[1] = code, ARGV[2] = now. The record, or nil.
const PENDING_LUA: &str = r"
local b = redis.call('GET', KEYS[1])
if not b then return false end
local f = redis.call('HMGET', b, 'state', 'code', 'exp', 'rec')
if f[1] ~= 'pending' or f[2] ~= ARGV[1] or tonumber(f[3]) <= tonumber(ARGV[2]) then return false end
return f[4]
";

/// DECIDE: KEYS[1] = the code's key; ARGV[1] = code, ARGV[2] = now, ARGV[3] = new state,
/// ARGV[4] = the approver. 1 = decided, 0 = not pending (any longer).
const DECIDE_LUA: &str = r"
local b = redis.call('GET', KEYS[1])
if not b then return 0 end
local f = redis.call('HMGET', b, 'state', 'code', 'exp')
if f[1] ~= 'pending' or f[2] ~= ARGV[1] or tonumber(f[3]) <= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', b, 'state', ARGV[3], 'by', ARGV[4])
local c = redis.call('HGET', b, 'caller')
if c then redis.call('ZREM', c, b) end
return 1
";

/// Key kinds of the binding hashes and the code strings: one hash tag, one cluster slot.
const BINDING_KIND: &str = "{approval}";
const CODE_KIND: &str = "{approval}-code";
const CALLER_KIND: &str = "{approval}-caller";

impl RedisStore {
    fn code_key(&self, code: &str) -> String {
        self.key(CODE_KIND, &URL_SAFE_NO_PAD.encode(Sha256::digest(code.as_bytes())))
    }

    fn record_of(&self, json: &str) -> Result<ApprovalRecord, StoreError> {
        serde_json::from_str(json).map_err(|e| StoreError::Unavailable { store: self.label().to_owned(), reason: format!("unreadable approval record: {e}") })
    }
}

#[async_trait::async_trait]
impl ApprovalStore for RedisStore {
    async fn ask(&self, binding: &BindingKey, fresh: &ApprovalRecord, bound: &CallerBound, now: UnixTime) -> Result<Ask, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let json = serde_json::to_string(fresh).map_err(|e| StoreError::Unavailable { store: self.label().to_owned(), reason: e.to_string() })?;
        let ttl_ms = fresh.expires.saturating_sub(now.secs()).max(1) * 1_000;
        let mut inv = script(&SCRIPT, ASK_LUA).key(self.key(BINDING_KIND, binding.as_str()));
        inv.key(self.code_key(&fresh.code)).key(self.caller_key(CALLER_KIND, &bound.caller));
        inv.arg(&fresh.code).arg(json).arg(fresh.expires).arg(ttl_ms).arg(now.secs()).arg(bound.max);
        let reply: Vec<String> = self.script(&inv).await?;
        match reply.as_slice() {
            [s] if s == "issued" => Ok(Ask::Issued),
            [s, rec] if s == "pending" => Ok(Ask::Pending(self.record_of(rec)?)),
            [s, rec] if s == "denied" => Ok(Ask::Denied(self.record_of(rec)?)),
            [s, rec, by] if s == "approved" => Ok(Ask::Approved { record: self.record_of(rec)?, approved_by: by.clone() }),
            [s, secs] if s == "full" => Ok(Ask::CallerFull(CallerFull { retry_after: std::time::Duration::from_secs(secs.parse().unwrap_or(1)) })),
            other => {
                Err(StoreError::Unavailable { store: self.label().to_owned(), reason: format!("unexpected approval script reply ({} items)", other.len()) })
            }
        }
    }

    async fn pending(&self, code: &str, now: UnixTime) -> Result<Option<ApprovalRecord>, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let mut inv = script(&SCRIPT, PENDING_LUA).key(self.code_key(code));
        inv.arg(code).arg(now.secs());
        let rec: Option<String> = self.script(&inv).await?;
        rec.map(|r| self.record_of(&r)).transpose()
    }

    async fn decide(&self, code: &str, choice: Choice, by: &str, now: UnixTime) -> Result<bool, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let mut inv = script(&SCRIPT, DECIDE_LUA).key(self.code_key(code));
        inv.arg(code).arg(now.secs()).arg(choice.as_str()).arg(by);
        Ok(self.script::<i64>(&inv).await? == 1)
    }
}

/// The approval contract against a real redis-server on loopback.
#[cfg(test)]
mod contract_tests {
    use std::sync::Arc;

    use super::super::contract_tests::store_with_prefix;
    use super::super::redis_server;
    use super::*;
    use crate::state::approval::contract;

    #[tokio::test]
    async fn redis_store_meets_the_approval_contract() {
        let server = redis_server::RedisServer::start();
        let s = store_with_prefix(&server, &format!("approval-contract-{}:", uuid::Uuid::new_v4()));
        contract::every_case(s).await;
    }

    #[tokio::test]
    async fn two_stores_on_one_redis_consume_an_approval_once() {
        let server = redis_server::RedisServer::start();
        let prefix = format!("approval-two-{}:", uuid::Uuid::new_v4());
        let (a, b) = (store_with_prefix(&server, &prefix), store_with_prefix(&server, &prefix));
        let now = UnixTime::now();
        let binding = BindingKey::new("user-1842", "https://agent.example", "00");
        let r = contract::record("shared-code", now.secs() + 60);
        assert_eq!(a.ask(&binding, &r, &contract::roomy(), now).await.unwrap(), Ask::Issued);
        assert_eq!(b.pending("shared-code", now).await.unwrap(), Some(r.clone()), "B sees A's link");
        assert!(b.decide("shared-code", Choice::Approve, "user-1842", now).await.unwrap());
        let mut tasks = Vec::new();
        for i in 0..50 {
            let s: Arc<dyn ApprovalStore> = if i % 2 == 0 { a.clone() } else { b.clone() };
            let binding = binding.clone();
            tasks.push(tokio::spawn(
                async move { s.ask(&binding, &contract::record(&format!("n{i}"), now.secs() + 60), &contract::roomy(), now).await.unwrap() },
            ));
        }
        let mut approved = 0;
        for t in tasks {
            approved += usize::from(matches!(t.await.unwrap(), Ask::Approved { .. }));
        }
        assert_eq!(approved, 1);
        let ttl: i64 = a.query(redis::cmd("PTTL").arg(a.key(BINDING_KIND, binding.as_str()))).await.unwrap();
        assert!(ttl > 0, "records carry a TTL: {ttl}");
    }
}
