//! Per-caller bounds (docs/design.md decision 13): no caller can use up what others share.
//!
//! Every store a caller can fill (idempotency entries, session bindings, pending approvals) has
//! a global bound and, beside it, a bound per caller. A [`CallerKey`] names the caller from
//! verified credentials only: the token's issuer and `sub`, else the verified agent, else the
//! client's IP address (one bucket per address for callers with no verified identity). A
//! caller at its bound gets [`CallerFull`] (429 `caller_limit_exceeded`): nothing is added,
//! nothing of anyone else's is evicted, and `retry_after` says when its first entry leaves.
//!
//! The memory stores count with a [`MemberIndex`] under their own lock; the Redis stores keep
//! one sorted set per caller (members scored by expiry) and count and add in one script
//! (`redis::caller`).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

/// SHA-256 of whom a per-caller bound counts against. Built from verified credentials only.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallerKey([u8; 32]);

impl CallerKey {
    /// A user: the verified token's issuer and `sub` (a `sub` is unique per issuer only).
    pub fn user(issuer: &str, sub: &str) -> CallerKey {
        CallerKey::of(b"user", &[issuer, sub])
    }

    /// An agent acting with no user: its verified agent id.
    pub fn agent(agent: &str) -> CallerKey {
        CallerKey::of(b"agent", &[agent])
    }

    /// A caller with no verified identity: its client address.
    pub fn address(ip: IpAddr) -> CallerKey {
        // An IPv4 address written as IPv6 (::ffff:a.b.c.d) is the same client.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        CallerKey::of(b"address", &[&ip.to_string()])
    }

    /// Each part is length-prefixed under a kind tag, so no two callers encode alike.
    fn of(kind: &[u8], parts: &[&str]) -> CallerKey {
        let mut h = Sha256::new();
        h.update(b"portcullis-caller-v1");
        h.update((kind.len() as u64).to_be_bytes());
        h.update(kind);
        for p in parts {
            h.update((p.len() as u64).to_be_bytes());
            h.update(p.as_bytes());
        }
        CallerKey(h.finalize().into())
    }

    /// base64url, for store keys.
    pub fn encoded(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// The first 128 bits, for the memory stores' maps.
    pub fn short(&self) -> u128 {
        let mut first = [0u8; 16];
        first.copy_from_slice(&self.0[..16]);
        u128::from_le_bytes(first)
    }
}

impl std::fmt::Debug for CallerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallerKey(…)")
    }
}

/// A caller and how many live entries it may hold in one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerBound {
    /// Whom the entry counts against.
    pub caller: CallerKey,
    /// Most live entries this caller may hold (at least 1).
    pub max: usize,
}

impl CallerBound {
    /// `caller` may hold `max` entries.
    pub fn new(caller: CallerKey, max: usize) -> CallerBound {
        CallerBound { caller, max: max.max(1) }
    }
}

/// The caller already holds as many live entries as it may: nothing was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerFull {
    /// When the caller's first entry leaves (at the latest): the `Retry-After`.
    pub retry_after: Duration,
}

/// Per caller, its live members and when each expires: how the memory stores count.
/// `T` is the store's clock reading (an `Instant`, or Unix seconds).
#[derive(Debug)]
pub struct MemberIndex<M, T> {
    by_caller: HashMap<u128, HashMap<M, T>>,
}

impl<M, T> Default for MemberIndex<M, T> {
    fn default() -> Self {
        MemberIndex { by_caller: HashMap::new() }
    }
}

impl<M: Hash + Eq + Clone, T: Ord + Copy> MemberIndex<M, T> {
    /// Adds `member` for `bound.caller`, living until `expires`, unless the caller already
    /// holds `bound.max` live members: then `Err(earliest expiry)`. A member the caller holds
    /// already is only given its new expiry (it is not a new entry).
    pub fn admit(&mut self, bound: &CallerBound, member: &M, expires: T, now: T) -> Result<(), T> {
        let members = self.by_caller.entry(bound.caller.short()).or_default();
        if let Some(e) = members.get_mut(member) {
            *e = expires;
            return Ok(());
        }
        if members.len() >= bound.max {
            members.retain(|_, e| *e > now);
            if members.len() >= bound.max {
                return Err(members.values().copied().min().unwrap_or(now));
            }
        }
        members.insert(member.clone(), expires);
        Ok(())
    }

    /// `member` (if `caller` holds it) now lives until `expires`.
    pub fn touch(&mut self, caller: &CallerKey, member: &M, expires: T) {
        if let Some(e) = self.by_caller.get_mut(&caller.short()).and_then(|m| m.get_mut(member)) {
            *e = expires;
        }
    }

    /// `member` left early (released, ended, decided): its slot is free.
    pub fn leave(&mut self, caller: &CallerKey, member: &M) {
        let key = caller.short();
        if let Some(members) = self.by_caller.get_mut(&key) {
            members.remove(member);
            if members.is_empty() {
                self.by_caller.remove(&key);
            }
        }
    }

    /// Drops every expired member (with the store's own sweep).
    pub fn sweep(&mut self, now: T) {
        self.by_caller.retain(|_, members| {
            members.retain(|_, e| *e > now);
            !members.is_empty()
        });
    }

    /// Members held for `caller`, live or not yet swept.
    pub fn held(&self, caller: &CallerKey) -> usize {
        self.by_caller.get(&caller.short()).map_or(0, HashMap::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_keys_never_confuse_one_caller_with_another() {
        assert_ne!(CallerKey::user("https://a.example", "u"), CallerKey::user("https://b.example", "u"), "sub is per issuer");
        assert_ne!(CallerKey::user("ab", "c"), CallerKey::user("a", "bc"), "parts are length-prefixed");
        assert_ne!(CallerKey::agent("https://a.example"), CallerKey::user("", "https://a.example"));
        let v4: IpAddr = "192.0.2.1".parse().expect("ip");
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().expect("ip");
        assert_eq!(CallerKey::address(v4), CallerKey::address(mapped), "one client, one bucket");
        assert_ne!(CallerKey::address(v4), CallerKey::address("192.0.2.2".parse().expect("ip")));
        assert_eq!(format!("{:?}", CallerKey::user("i", "alice")), "CallerKey(…)");
    }

    #[test]
    fn an_index_bounds_each_caller_and_frees_slots_that_leave_or_expire() {
        let (a, b) = (CallerBound::new(CallerKey::agent("a"), 2), CallerBound::new(CallerKey::agent("b"), 2));
        let mut ix = MemberIndex::<&str, u64>::default();
        assert_eq!(ix.admit(&a, &"1", 10, 0), Ok(()));
        assert_eq!(ix.admit(&a, &"2", 20, 0), Ok(()));
        assert_eq!(ix.admit(&a, &"3", 30, 0), Err(10), "full: the first leaves at 10");
        assert_eq!(ix.admit(&a, &"2", 25, 0), Ok(()), "a member held already is not a new entry");
        assert_eq!(ix.admit(&b, &"1", 10, 0), Ok(()), "another caller is unaffected");
        ix.leave(&a.caller, &"1");
        assert_eq!(ix.admit(&a, &"3", 30, 0), Ok(()), "a member that left frees its slot");
        assert_eq!(ix.admit(&a, &"4", 40, 24), Err(25), "the earliest live member leaves first");
        assert_eq!(ix.admit(&a, &"4", 40, 26), Ok(()), "expired members free their slots");
        ix.sweep(100);
        assert_eq!((ix.held(&a.caller), ix.held(&b.caller)), (0, 0));
    }
}
