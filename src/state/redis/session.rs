//! Session bindings on Redis, one Lua script per operation so each read-decide-write is atomic
//! across instances. KEYS[1] = `prefix + "session:" + base64url(SHA-256(session id))`; its value
//! is `owner|caller|refresh-at`: the owner digest, the digest of the caller the session counts
//! against (decision 13) and when (Unix ms) that count is next pushed out. A value made before
//! per-caller bounds holds the owner digest alone; it is read as such and counted nowhere.
//!
//! Each caller's sessions are counted in its set (`prefix + "session-caller:" + caller`,
//! `redis::caller`), scored by an expiry never earlier than the session's: a new session is
//! admitted there before it is bound (the count and the add are one script), a session ended
//! by its owner leaves it, and a used session pushes its score out at most every quarter of its
//! lifetime (the score runs a quarter lifetime ahead, so it stays past the real idle expiry).

use std::time::Duration;

use super::{millis, RedisStore};
use super::{script, unix_ms as at_ms};
use crate::state::caller::CallerBound;
use crate::state::session::{Binding, OwnerKey, SessionKey, SessionStore};
use crate::state::StoreError;
use portcullis_wire::UnixTime;

/// BIND: ARGV[1] = owner, ARGV[2] = idle lifetime (ms), ARGV[3] = caller, ARGV[4] = refresh-at.
/// 1 = bound to ARGV[1] now (lifetime restarted), 2 = another owner holds it.
const BIND_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^[^|]*') ~= ARGV[1] then return 2 end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[3] .. '|' .. ARGV[4], 'PX', ARGV[2])
return 1
";

/// VERIFY: ARGV[1] = owner, ARGV[2] = idle lifetime (ms), ARGV[3] = now (ms), ARGV[4] = the
/// next refresh-at. '0' = unbound, '1' = bound to ARGV[1] (lifetime restarted), '2' = another
/// owner holds it, '3' .. caller = bound to ARGV[1], and the caller's count is due a push.
const VERIFY_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return '0' end
local owner, caller, at = string.match(cur, '^([^|]*)|([^|]*)|(%d+)$')
if not owner then owner = cur end
if owner ~= ARGV[1] then return '2' end
if caller and tonumber(at) <= tonumber(ARGV[3]) then
  redis.call('SET', KEYS[1], owner .. '|' .. caller .. '|' .. ARGV[4], 'PX', ARGV[2])
  return '3' .. caller
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return '1'
";

/// UNBIND: ARGV[1] = owner. The removed binding's caller ('' for an old value), or nil when
/// ARGV[1] holds no binding.
const UNBIND_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then return false end
local owner, caller = string.match(cur, '^([^|]*)|?([^|]*)')
if owner ~= ARGV[1] then return false end
redis.call('DEL', KEYS[1])
return caller
";

/// The kind of the per-caller sets.
const CALLER_KIND: &str = "session-caller";

/// How far a session's count runs ahead of its idle expiry, and how often a used session
/// pushes it out: a quarter of the lifetime.
fn slack(ttl: Duration) -> Duration {
    (ttl / 4).max(Duration::from_millis(1))
}

impl RedisStore {
    fn unexpected(&self, what: &str) -> StoreError {
        StoreError::Unavailable { store: self.label().to_owned(), reason: format!("unexpected session script reply {what:?}") }
    }
}

#[async_trait::async_trait]
impl SessionStore for RedisStore {
    async fn bind(&self, session: &SessionKey, owner: &OwnerKey, bound: &CallerBound, ttl: Duration) -> Result<Binding, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let (now, member) = (UnixTime::now(), session.encoded());
        if let Err(full) = self.admit_member(CALLER_KIND, bound, &member, ttl + slack(ttl), now).await? {
            return Ok(Binding::CallerFull(full));
        }
        let mut inv = script(&SCRIPT, BIND_LUA).key(self.key("session", &member));
        inv.arg(owner.encoded()).arg(millis(ttl)).arg(bound.caller.encoded()).arg(at_ms(now, slack(ttl)));
        match self.script::<i64>(&inv).await {
            Ok(1) => Ok(Binding::Owner),
            Ok(2) => {
                // Another owner's session: it does not count against this caller.
                let _ = self.leave_member(CALLER_KIND, &bound.caller, &member).await;
                Ok(Binding::Other)
            }
            Ok(other) => Err(self.unexpected(&other.to_string())),
            Err(e) => {
                let _ = self.leave_member(CALLER_KIND, &bound.caller, &member).await;
                Err(e)
            }
        }
    }

    async fn verify(&self, session: &SessionKey, owner: &OwnerKey, ttl: Duration) -> Result<Binding, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let (now, member) = (UnixTime::now(), session.encoded());
        let mut inv = script(&SCRIPT, VERIFY_LUA).key(self.key("session", &member));
        inv.arg(owner.encoded()).arg(millis(ttl)).arg(at_ms(now, Duration::ZERO)).arg(at_ms(now, slack(ttl)));
        let reply: String = self.script(&inv).await?;
        match reply.as_str() {
            "0" => Ok(Binding::Unbound),
            "1" => Ok(Binding::Owner),
            "2" => Ok(Binding::Other),
            r => {
                let Some(caller) = r.strip_prefix('3') else { return Err(self.unexpected(r)) };
                // The caller's set is keyed by the digest the binding recorded.
                let key = self.key(CALLER_KIND, caller);
                if let Err(e) = self.touch_member_at(&key, &member, ttl + slack(ttl), now).await {
                    tracing::warn!(error = %e, "A used session's per-caller count was not pushed out; it may stop counting before the session ends");
                }
                Ok(Binding::Owner)
            }
        }
    }

    async fn unbind(&self, session: &SessionKey, owner: &OwnerKey) -> Result<bool, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let member = session.encoded();
        let mut inv = script(&SCRIPT, UNBIND_LUA).key(self.key("session", &member));
        inv.arg(owner.encoded());
        let Some(caller) = self.script::<Option<String>>(&inv).await? else { return Ok(false) };
        if !caller.is_empty() {
            // A slot not freed now frees itself when the session would have expired.
            let _ = self.query::<i64>(redis::cmd("ZREM").arg(self.key(CALLER_KIND, &caller)).arg(&member)).await;
        }
        Ok(true)
    }
}

/// The session contract against a real redis-server on loopback.
#[cfg(test)]
mod contract_tests {
    use super::super::contract_tests::store;
    use super::super::redis_server;
    use super::*;

    #[tokio::test]
    async fn redis_store_meets_the_session_contract() {
        use crate::state::session::contract;
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        contract::every_case_but_expiry(s.clone()).await;
        // Real time: steps of 1.2 s against a 2 s lifetime leave 0.8 s for scheduling delays.
        contract::a_binding_expires_after_ttl_without_use(s.as_ref(), Duration::from_secs(2), tokio::time::sleep).await;
    }

    #[tokio::test]
    async fn session_keys_hold_digests_only_and_carry_a_ttl() {
        use crate::state::session::{OwnerKey, SessionKey, SessionStore};
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        let session = SessionKey::of(b"secret-session-id");
        let bound = crate::state::caller::CallerBound::new(crate::state::caller::CallerKey::user("https://issuer.example", "user-1842"), 10);
        s.bind(&session, &OwnerKey::of(Some("https://agent.example"), None, Some("user-1842")), &bound, Duration::from_secs(30)).await.expect("bind");
        let all: Vec<String> = s.query(redis::cmd("KEYS").arg("*")).await.expect("keys");
        assert_eq!(all.len(), 2, "the binding and its caller's count: {all:?}");
        assert!(all.iter().all(|k| !k.contains("secret") && !k.contains("user-1842")), "{all:?}");
        let counted: Vec<String> = s.query(redis::cmd("ZRANGE").arg(s.caller_key("session-caller", &bound.caller)).arg(0).arg(-1)).await.expect("zrange");
        assert_eq!(counted, [session.encoded()], "the count holds the session's digest");
        let ttl: i64 = s.query(redis::cmd("PTTL").arg(s.caller_key("session-caller", &bound.caller))).await.expect("pttl");
        assert!((30_000..=38_000).contains(&ttl), "the count lives a quarter lifetime past the session: {ttl}");
        let keys: Vec<String> = s.query(redis::cmd("KEYS").arg("*:session:*")).await.expect("keys");
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert!(keys[0].ends_with(&session.encoded()), "{keys:?}");
        let value: String = s.query(redis::cmd("GET").arg(&keys[0])).await.expect("get");
        assert!(!value.contains("agent") && !value.contains("user-1842"), "the owner is stored as a digest: {value}");
        let ttl: i64 = s.query(redis::cmd("PTTL").arg(&keys[0])).await.expect("pttl");
        assert!((29_000..=30_000).contains(&ttl), "{ttl}");
    }
}
