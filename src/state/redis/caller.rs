//! Per-caller bounds on Redis (decision 13): one sorted set per (store, caller),
//! `prefix + kind + ":" + caller digest`, whose members are the caller's entries (the entry's
//! own key suffix) scored by when each expires (Unix ms).
//!
//! Counting and adding is one script ([`RedisStore::admit_member`]): expired members are trimmed, the
//! rest counted, and the member added only below the bound, so among concurrent first uses on
//! any number of instances exactly `max` are admitted. A member is removed when its entry leaves
//! early (released, ended); one whose entry lives longer (a recorded answer, a used session) is
//! given its new expiry ([`RedisStore::touch_member`]). The set itself expires with its last member, so
//! Redis memory stays bounded. A score is never earlier than the entry's real expiry, so the
//! count never forgets a live entry (it may hold one a little past its end: the Redis clock and
//! the gateway's differ).

use std::time::Duration;

use super::RedisStore;
use super::{script, unix_ms};
use crate::state::caller::{CallerBound, CallerFull, CallerKey};
use crate::state::StoreError;
use portcullis_wire::UnixTime;

/// ADMIT: KEYS[1] = the caller's set; ARGV[1] = member, ARGV[2] = its expiry (ms),
/// ARGV[3] = now (ms), ARGV[4] = the bound. -1 = admitted (or held already: its expiry is
/// pushed out), else the ms until the caller's first entry expires.
const ADMIT_LUA: &str = r"
local now = tonumber(ARGV[3])
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if held then
  if tonumber(ARGV[2]) > tonumber(held) then redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1]) end
else
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return math.max(1, tonumber(first[2]) - now)
  end
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now))
return -1
";

/// TOUCH: KEYS[1] = the caller's set; ARGV[1] = member, ARGV[2] = its new expiry (ms),
/// ARGV[3] = now (ms). A member not held is not added; an expiry is never brought forward.
/// (Plain ZSCORE/ZADD rather than `ZADD XX GT`, which needs Redis 6.2.)
const TOUCH_LUA: &str = r"
local held = redis.call('ZSCORE', KEYS[1], ARGV[1])
if held and tonumber(ARGV[2]) > tonumber(held) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  local want = tonumber(ARGV[2]) - tonumber(ARGV[3])
  if redis.call('PTTL', KEYS[1]) < want then redis.call('PEXPIRE', KEYS[1], math.max(1, want)) end
end
return 0
";

/// Unix milliseconds of `now + ttl`.
fn expiry_ms(now: UnixTime, ttl: Duration) -> u64 {
    unix_ms(now, ttl)
}

fn now_ms(now: UnixTime) -> u64 {
    unix_ms(now, Duration::ZERO)
}

impl RedisStore {
    /// The key of `caller`'s set for one store (`kind`).
    pub(crate) fn caller_key(&self, kind: &str, caller: &CallerKey) -> String {
        self.key(kind, &caller.encoded())
    }

    /// Admits `member` (living `ttl` from `now`) into `bound.caller`'s set for `kind`, unless the
    /// caller holds `bound.max` live members (see the module docs).
    pub(crate) async fn admit_member(
        &self,
        kind: &str,
        bound: &CallerBound,
        member: &str,
        ttl: Duration,
        now: UnixTime,
    ) -> Result<Result<(), CallerFull>, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let mut inv = script(&SCRIPT, ADMIT_LUA).key(self.caller_key(kind, &bound.caller));
        inv.arg(member).arg(expiry_ms(now, ttl)).arg(now_ms(now)).arg(bound.max);
        let reply: i64 = self.script(&inv).await?;
        if reply < 0 {
            return Ok(Ok(()));
        }
        Ok(Err(CallerFull { retry_after: Duration::from_millis(u64::try_from(reply).unwrap_or(1)) }))
    }

    /// `member` of `caller`'s set for `kind`, if held, now lives `ttl` from `now`.
    pub(crate) async fn touch_member(&self, kind: &str, caller: &CallerKey, member: &str, ttl: Duration, now: UnixTime) -> Result<(), StoreError> {
        self.touch_member_at(&self.caller_key(kind, caller), member, ttl, now).await
    }

    /// [`Self::touch_member`] on the set named `key`.
    pub(crate) async fn touch_member_at(&self, key: &str, member: &str, ttl: Duration, now: UnixTime) -> Result<(), StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let mut inv = script(&SCRIPT, TOUCH_LUA).key(key);
        inv.arg(member).arg(expiry_ms(now, ttl)).arg(now_ms(now));
        self.script::<i64>(&inv).await.map(|_| ())
    }

    /// `member` left `caller`'s set for `kind` early: its slot is free.
    pub(crate) async fn leave_member(&self, kind: &str, caller: &CallerKey, member: &str) -> Result<(), StoreError> {
        self.query::<i64>(redis::cmd("ZREM").arg(self.caller_key(kind, caller)).arg(member)).await.map(|_| ())
    }
}
