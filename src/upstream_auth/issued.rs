//! The tokens a token exchange issued, kept until they expire, and the exchanges in flight.
//!
//! A hit is the price every request with a cached exchange pays, so it is one lock of one
//! shard, one lookup by the subject token's SHA-256 (already computed by the token stage) and a
//! comparison of the agent and scope: no clock read (the request's arrival is passed in), no
//! allocation. The bounds (all callers together, and each caller's share, decision 13) are
//! counted beside the shards, touched only when an entry comes or goes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use http::HeaderValue;
use portcullis_wire::UnixTime;
use tokio::sync::watch;

use super::CredentialError;

/// Locks the cache is split over: requests for different tokens rarely wait for each other.
const SHARDS: usize = 16;
/// Expired entries are looked for across the whole cache at most this often (when a caller is
/// at its share or the cache is full), so a burst of misses cannot make every request sweep.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What a request needs a token for.
pub(super) struct Wanted<'a> {
    /// SHA-256 of the subject token.
    pub digest: [u8; 32],
    /// The verified agent (the actor token names it).
    pub agent: Option<&'a str>,
    /// The scope asked for.
    pub scope: Option<&'a str>,
    /// Whom the entry counts against (`CallerKey::short`).
    pub caller: u128,
}

impl Wanted<'_> {
    fn shard(&self) -> usize {
        usize::from(self.digest[0]) % SHARDS
    }
}

/// An issued token as the backend gets it (`Bearer <token>`, sensitive), until when.
struct Held {
    agent: Option<Box<str>>,
    scope: Option<Box<str>>,
    caller: u128,
    header: HeaderValue,
    until: Duration,
}

impl Held {
    fn serves(&self, wanted: &Wanted<'_>) -> bool {
        self.agent.as_deref() == wanted.agent && self.scope.as_deref() == wanted.scope
    }
}

/// Entries per subject token: one per (agent, scope) it was exchanged for.
type Shard = HashMap<[u8; 32], Vec<Held>>;

#[derive(Default)]
struct Counts {
    total: u64,
    by_caller: HashMap<u128, u64>,
}

/// Why an entry could not be counted.
#[derive(Debug, PartialEq)]
enum Full {
    Caller,
    Cache,
}

/// Issued tokens, at most `capacity` in all and `per_caller` for any one caller.
pub(super) struct IssuedTokens {
    shards: Box<[Mutex<Shard>]>,
    counts: Mutex<Counts>,
    capacity: u64,
    per_caller: u64,
    /// When expired entries were last looked for.
    swept: Mutex<Duration>,
    flights: Mutex<HashMap<FlightKey, watch::Sender<Option<Outcome>>>>,
}

/// An exchange's outcome, as the calls that waited for it get it.
pub(super) type Outcome = Result<HeaderValue, CredentialError>;

type FlightKey = ([u8; 32], Option<Box<str>>, Option<Box<str>>);

fn flight_key(wanted: &Wanted<'_>) -> FlightKey {
    (wanted.digest, wanted.agent.map(Box::from), wanted.scope.map(Box::from))
}

/// How a call that missed the cache gets its token.
pub(super) enum Turn<'a> {
    /// Another call is exchanging for the same key: its outcome, or `None` when that call
    /// went away before it had one (the caller asks again).
    Waited(Option<Outcome>),
    /// Nobody is: this call exchanges, and hands the outcome to those who wait.
    Exchange(Flight<'a>),
}

/// The one exchange in flight for a key (`None`: the flights could not be locked, so this
/// call exchanges alone). Dropped without [`Flight::land`] (its request went away), it lets the
/// waiting calls ask again.
pub(super) struct Flight<'a> {
    tokens: &'a IssuedTokens,
    key: Option<FlightKey>,
}

impl Flight<'_> {
    /// Gives `outcome` to every call waiting for it; the flight is over.
    pub(super) fn land(mut self, outcome: &Outcome) {
        if let Some(sender) = self.end() {
            sender.send_replace(Some(outcome.clone()));
        }
    }

    /// Takes the flight off the map; its sender, once dropped, closes the waiters' channel.
    fn end(&mut self) -> Option<watch::Sender<Option<Outcome>>> {
        let key = self.key.take()?;
        self.tokens.flights.lock().ok()?.remove(&key)
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.end();
    }
}

impl IssuedTokens {
    pub(super) fn new(capacity: u64, per_caller: u64) -> IssuedTokens {
        IssuedTokens {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::new())).collect(),
            counts: Mutex::new(Counts::default()),
            capacity,
            per_caller,
            swept: Mutex::new(Duration::ZERO),
            flights: Mutex::new(HashMap::new()),
        }
    }

    /// The token kept for `wanted`, unless it expired by `now` (then it is dropped).
    pub(super) fn get(&self, wanted: &Wanted<'_>, now: UnixTime) -> Option<HeaderValue> {
        let expired = {
            let mut shard = self.shards[wanted.shard()].lock().ok()?;
            let held = shard.get_mut(&wanted.digest)?;
            let i = held.iter().position(|h| h.serves(wanted))?;
            if held[i].until > now.0 {
                return Some(held[i].header.clone());
            }
            let caller = held.swap_remove(i).caller;
            if held.is_empty() {
                shard.remove(&wanted.digest);
            }
            caller
        };
        self.free([expired]);
        None
    }

    /// Keeps `header` for `wanted` for `ttl` from `now`, unless the caller holds its share or
    /// the cache is full of entries that have not expired yet (the soonest to expire in the
    /// entry's shard then makes room). Whether it was kept.
    pub(super) fn keep(&self, wanted: &Wanted<'_>, header: HeaderValue, ttl: Duration, now: UnixTime) -> bool {
        if ttl.is_zero() {
            return false;
        }
        let mut counted = self.count(wanted.caller);
        if counted.is_err() && self.sweep(now) {
            counted = self.count(wanted.caller);
        }
        if counted == Err(Full::Cache) {
            self.evict_soonest(wanted.shard());
            counted = self.count(wanted.caller);
        }
        if counted.is_err() {
            return false;
        }
        let held = Held { agent: wanted.agent.map(Box::from), scope: wanted.scope.map(Box::from), caller: wanted.caller, header, until: now.0 + ttl };
        let replaced = {
            let Ok(mut shard) = self.shards[wanted.shard()].lock() else { return false };
            let entries = shard.entry(wanted.digest).or_default();
            match entries.iter_mut().find(|h| h.serves(wanted)) {
                Some(old) => Some(std::mem::replace(old, held).caller),
                None => {
                    entries.push(held);
                    None
                }
            }
        };
        self.free(replaced);
        true
    }

    /// Drops every entry whose token is `header` (the backend refused it).
    pub(super) fn forget(&self, header: &HeaderValue) {
        self.drop_where(|h| h.header == header);
    }

    /// The exchange for `wanted`: the one in flight, or this call's to make.
    pub(super) async fn turn(&self, wanted: &Wanted<'_>) -> Turn<'_> {
        let key = flight_key(wanted);
        let mut waiting = {
            let Ok(mut flights) = self.flights.lock() else {
                return Turn::Exchange(Flight { tokens: self, key: None });
            };
            match flights.get(&key) {
                Some(sender) => sender.subscribe(),
                None => {
                    flights.insert(key.clone(), watch::channel(None).0);
                    return Turn::Exchange(Flight { tokens: self, key: Some(key) });
                }
            }
        };
        let outcome = waiting.wait_for(Option::is_some).await.ok().and_then(|o| o.clone());
        Turn::Waited(outcome)
    }

    /// Counts one more entry for `caller`.
    fn count(&self, caller: u128) -> Result<(), Full> {
        let Ok(mut counts) = self.counts.lock() else { return Err(Full::Cache) };
        if counts.total >= self.capacity {
            return Err(Full::Cache);
        }
        let n = counts.by_caller.entry(caller).or_insert(0);
        if *n >= self.per_caller {
            return Err(Full::Caller);
        }
        *n += 1;
        counts.total += 1;
        Ok(())
    }

    /// Uncounts the entries of `callers` that left the cache.
    fn free(&self, callers: impl IntoIterator<Item = u128>) {
        let Ok(mut counts) = self.counts.lock() else { return };
        for caller in callers {
            counts.total = counts.total.saturating_sub(1);
            if let std::collections::hash_map::Entry::Occupied(mut e) = counts.by_caller.entry(caller) {
                *e.get_mut() -= 1;
                if *e.get() == 0 {
                    e.remove();
                }
            }
        }
    }

    /// Drops the expired entries, unless that was done less than [`SWEEP_EVERY`] ago. Whether
    /// it looked.
    fn sweep(&self, now: UnixTime) -> bool {
        {
            let Ok(mut swept) = self.swept.lock() else { return false };
            if now.0 < *swept + SWEEP_EVERY {
                return false;
            }
            *swept = now.0;
        }
        self.drop_where(|h| h.until <= now.0);
        true
    }

    /// Drops the entry of shard `first` (or, when it has none, of the next shard that has one)
    /// that expires soonest.
    fn evict_soonest(&self, first: usize) {
        for i in (0..SHARDS).map(|n| (first + n) % SHARDS) {
            let Ok(mut shard) = self.shards[i].lock() else { continue };
            let soonest = shard.iter().flat_map(|(digest, held)| held.iter().enumerate().map(move |(n, h)| (h.until, *digest, n))).min();
            if let Some((_, digest, n)) = soonest {
                let caller = shard.get_mut(&digest).map(|held| held.swap_remove(n).caller);
                if shard.get(&digest).is_some_and(Vec::is_empty) {
                    shard.remove(&digest);
                }
                drop(shard);
                self.free(caller);
                return;
            }
        }
    }

    fn drop_where(&self, gone: impl Fn(&Held) -> bool) {
        for shard in self.shards.iter() {
            let mut freed = Vec::new();
            {
                let Ok(mut shard) = shard.lock() else { continue };
                shard.retain(|_, held| {
                    held.retain(|h| {
                        let stays = !gone(h);
                        if !stays {
                            freed.push(h.caller);
                        }
                        stays
                    });
                    !held.is_empty()
                });
            }
            self.free(freed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> UnixTime {
        UnixTime(Duration::from_secs(secs))
    }

    fn wanted(token: u8, agent: Option<&'static str>, caller: u128) -> Wanted<'static> {
        Wanted { digest: [token; 32], agent, scope: Some("read"), caller }
    }

    fn bearer(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn a_token_is_kept_for_its_agent_and_scope_until_it_expires() {
        let tokens = IssuedTokens::new(10, 10);
        let alice = wanted(1, Some("agent-a"), 1);
        assert!(tokens.keep(&alice, bearer("Bearer a"), Duration::from_secs(60), at(1000)));
        assert_eq!(tokens.get(&alice, at(1059)), Some(bearer("Bearer a")));
        assert_eq!(tokens.get(&wanted(1, Some("agent-b"), 1), at(1001)), None, "another agent");
        assert_eq!(tokens.get(&wanted(1, None, 1), at(1001)), None, "no agent");
        assert_eq!(tokens.get(&Wanted { scope: Some("write"), ..wanted(1, Some("agent-a"), 1) }, at(1001)), None, "another scope");
        assert_eq!(tokens.get(&wanted(2, Some("agent-a"), 1), at(1001)), None, "another subject token");
        assert_eq!(tokens.get(&alice, at(1060)), None, "expired");
        assert_eq!(tokens.counts.lock().unwrap().total, 0, "the expired entry was dropped and uncounted");
    }

    #[test]
    fn a_caller_at_its_share_gets_room_only_when_its_entries_expire() {
        let tokens = IssuedTokens::new(10, 1);
        assert!(tokens.keep(&wanted(1, None, 7), bearer("Bearer 1"), Duration::from_secs(5), at(1000)));
        assert!(!tokens.keep(&wanted(2, None, 7), bearer("Bearer 2"), Duration::from_secs(60), at(1001)), "at its share");
        assert!(tokens.keep(&wanted(3, None, 8), bearer("Bearer 3"), Duration::from_secs(60), at(1001)), "another caller");
        assert!(tokens.keep(&wanted(2, None, 7), bearer("Bearer 2"), Duration::from_secs(60), at(1006)), "its entry expired");
        assert_eq!(tokens.get(&wanted(2, None, 7), at(1007)), Some(bearer("Bearer 2")));
        assert_eq!(tokens.get(&wanted(3, None, 8), at(1007)), Some(bearer("Bearer 3")));
    }

    #[test]
    fn a_full_cache_drops_the_entry_that_expires_soonest() {
        let tokens = IssuedTokens::new(2, 10);
        // Both in shard 0: token bytes 0 and 16.
        assert!(tokens.keep(&wanted(0, None, 1), bearer("Bearer long"), Duration::from_secs(600), at(1000)));
        assert!(tokens.keep(&wanted(16, None, 2), bearer("Bearer short"), Duration::from_secs(60), at(1000)));
        assert!(tokens.keep(&wanted(32, None, 3), bearer("Bearer new"), Duration::from_secs(60), at(1000)));
        assert_eq!(tokens.get(&wanted(16, None, 2), at(1001)), None);
        assert_eq!(tokens.get(&wanted(0, None, 1), at(1001)), Some(bearer("Bearer long")));
        assert_eq!(tokens.get(&wanted(32, None, 3), at(1001)), Some(bearer("Bearer new")));
        assert_eq!(tokens.counts.lock().unwrap().total, 2);
    }

    #[test]
    fn a_forgotten_token_is_gone_and_its_slot_back() {
        let tokens = IssuedTokens::new(10, 1);
        assert!(tokens.keep(&wanted(1, None, 7), bearer("Bearer 1"), Duration::from_secs(60), at(1000)));
        tokens.forget(&bearer("Bearer 1"));
        assert_eq!(tokens.get(&wanted(1, None, 7), at(1001)), None);
        assert!(tokens.keep(&wanted(2, None, 7), bearer("Bearer 2"), Duration::from_secs(60), at(1001)), "the slot came back");
    }

    #[tokio::test]
    async fn calls_that_miss_together_wait_for_one_exchange_and_ask_again_when_it_goes_away() {
        let tokens = IssuedTokens::new(10, 10);
        let w = wanted(1, Some("agent-a"), 1);
        let Turn::Exchange(first) = tokens.turn(&w).await else { panic!("the first call exchanges") };
        let (waited, ()) = tokio::join!(tokens.turn(&w), async {
            tokio::task::yield_now().await;
            first.land(&Ok(bearer("Bearer a")));
        });
        assert!(matches!(waited, Turn::Waited(Some(Ok(ref h))) if h == "Bearer a"));
        // The flight is over: the next call exchanges; when it goes away, its waiters ask again.
        let Turn::Exchange(second) = tokens.turn(&w).await else { panic!("no flight left behind") };
        let (waited, ()) = tokio::join!(tokens.turn(&w), async {
            tokio::task::yield_now().await;
            drop(second);
        });
        assert!(matches!(waited, Turn::Waited(None)));
    }
}
