//! The idempotency journal on Redis: one string per key (`prefix + "journal:" + key`), every
//! read-decide-write one Lua script, so a reservation is exactly-once across every instance
//! sharing the Redis. Every entry carries a TTL (`in_flight_ttl` while in flight, `ttl` once
//! recorded), so Redis memory stays bounded and a reservation whose gateway died frees itself.
//!
//! Each caller's entries are also counted in its set (`prefix + "journal-caller:" + caller`,
//! `redis::caller`): a key this script reserved is then admitted there, in one script, and
//! released at once when the caller is at its bound; a recorded answer pushes its member's
//! expiry out, a release removes it.

use std::time::Duration;

use portcullis_wire::UnixTime;

use super::RedisStore;
use super::{millis, script};
use crate::state::journal::{self, JournalStore, RecordedAnswer, Reserve, Ticket};
use crate::state::StoreError;

/// RESERVE: KEYS[1] = entry; ARGV[1] = the in-flight value, ARGV[2] = its lifetime in ms.
/// Returns the live entry, or nil after reserving.
const RESERVE_LUA: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
";

/// COMPLETE: ARGV[1] = the holder's in-flight value, ARGV[2] = the recorded value, ARGV[3] = ms.
/// 1 = recorded, 0 = not this holder's (any longer).
const COMPLETE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// RELEASE: ARGV[1] = the holder's in-flight value. 1 = removed, 0 = not this holder's.
const RELEASE_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The kind of the per-caller sets.
const CALLER_KIND: &str = "journal-caller";

#[async_trait::async_trait]
impl JournalStore for RedisStore {
    async fn reserve(&self, ticket: &Ticket, in_flight_ttl: Duration) -> Result<Reserve, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let mut inv = script(&SCRIPT, RESERVE_LUA).key(self.key("journal", &ticket.key));
        inv.arg(journal::in_flight_value(ticket)).arg(millis(in_flight_ttl));
        let current: Option<String> = self.script(&inv).await?;
        match current {
            None => match self.admit_member(CALLER_KIND, &ticket.bound, &ticket.key, in_flight_ttl, UnixTime::now()).await {
                Ok(Ok(())) => Ok(Reserve::Reserved),
                Ok(Err(full)) => {
                    self.release(ticket).await?;
                    Ok(Reserve::CallerFull(full))
                }
                Err(e) => {
                    // Not counted: not reserved either (best effort; it lapses after in_flight_ttl).
                    let _ = self.release(ticket).await;
                    Err(e)
                }
            },
            Some(v) => journal::parse_value(&v).map(Reserve::Taken).map_err(|e| StoreError::Unavailable { store: self.label().to_owned(), reason: e }),
        }
    }

    async fn complete(&self, ticket: &Ticket, answer: &RecordedAnswer, ttl: Duration) -> Result<bool, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let value = journal::recorded_value(&ticket.fingerprint, answer).map_err(|e| StoreError::Unavailable { store: self.label().to_owned(), reason: e })?;
        let mut inv = script(&SCRIPT, COMPLETE_LUA).key(self.key("journal", &ticket.key));
        inv.arg(journal::in_flight_value(ticket)).arg(value).arg(millis(ttl));
        let recorded = self.script::<i64>(&inv).await? == 1;
        if recorded {
            if let Err(e) = self.touch_member(CALLER_KIND, &ticket.bound.caller, &ticket.key, ttl, UnixTime::now()).await {
                // The entry keeps counting until its in-flight lifetime ends, then no longer.
                tracing::warn!(error = %e, "Recorded idempotency answer not counted for its caller past idempotency.in_flight_ttl");
            }
        }
        Ok(recorded)
    }

    async fn release(&self, ticket: &Ticket) -> Result<bool, StoreError> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let mut inv = script(&SCRIPT, RELEASE_LUA).key(self.key("journal", &ticket.key));
        inv.arg(journal::in_flight_value(ticket));
        let released = self.script::<i64>(&inv).await? == 1;
        if released {
            // A slot not freed now frees itself when the in-flight lifetime ends.
            let _ = self.leave_member(CALLER_KIND, &ticket.bound.caller, &ticket.key).await;
        }
        Ok(released)
    }
}

/// The journal contract suite against a real redis-server on loopback.
#[cfg(test)]
mod contract_tests {
    use std::sync::Arc;

    use super::super::contract_tests::store_with_prefix;
    use super::super::redis_server;
    use super::*;
    use crate::state::caller::{CallerBound, CallerKey};
    use crate::state::journal::contract;

    fn store(server: &redis_server::RedisServer) -> Arc<RedisStore> {
        store_with_prefix(server, &format!("journal-contract-{}:", uuid::Uuid::new_v4()))
    }

    #[tokio::test]
    async fn redis_store_meets_the_journal_contract() {
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        contract::every_case_but_expiry(s.clone()).await;
        // Real time: steps of 1.2 s against a 2 s lifetime leave 0.8 s for scheduling delays.
        contract::entries_expire_after_their_ttl(s.as_ref(), Duration::from_secs(2), tokio::time::sleep).await;
    }

    #[tokio::test]
    async fn two_stores_on_one_redis_reserve_a_key_exactly_once() {
        let server = redis_server::RedisServer::start();
        let prefix = format!("two-instances-{}:", uuid::Uuid::new_v4());
        let (a, b) = (store_with_prefix(&server, &prefix), store_with_prefix(&server, &prefix));
        let mut tasks = Vec::new();
        for i in 0..50 {
            let s: Arc<dyn JournalStore> = if i % 2 == 0 { a.clone() } else { b.clone() };
            tasks.push(tokio::spawn(async move {
                let t = Ticket { key: "shared".into(), fingerprint: [7; 32], token: format!("t{i}"), bound: CallerBound::new(CallerKey::agent("a"), 10) };
                s.reserve(&t, Duration::from_secs(60)).await.expect("reserve") == Reserve::Reserved
            }));
        }
        let mut won = 0;
        for t in tasks {
            won += usize::from(t.await.expect("task"));
        }
        assert_eq!(won, 1);
    }

    #[tokio::test]
    async fn entries_carry_their_lifetime_in_redis() {
        let server = redis_server::RedisServer::start();
        let s = store(&server);
        let t = Ticket { key: "digest-of-sub-and-key".into(), fingerprint: [9; 32], token: "tok".into(), bound: CallerBound::new(CallerKey::agent("a"), 10) };
        assert_eq!(s.reserve(&t, Duration::from_secs(30)).await.expect("reserve"), Reserve::Reserved);
        let ttl: i64 = s.query(redis::cmd("PTTL").arg(s.key("journal", &t.key))).await.expect("pttl");
        assert!((29_000..=30_000).contains(&ttl), "{ttl}");
        let answer = RecordedAnswer { status: 200, content_type: None, body: bytes::Bytes::from_static(b"{}"), id: None, progress_token: None };
        assert!(s.complete(&t, &answer, Duration::from_secs(3600)).await.expect("complete"));
        let ttl: i64 = s.query(redis::cmd("PTTL").arg(s.key("journal", &t.key))).await.expect("pttl");
        assert!((3_599_000..=3_600_000).contains(&ttl), "{ttl}");
    }
}
