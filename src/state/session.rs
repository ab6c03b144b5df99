//! Session bindings (docs/design.md decision 9): which identity owns each `Mcp-Session-Id`.
//!
//! The store holds digests only: a [`SessionKey`] (SHA-256 of the session id the backend
//! issued) maps to an [`OwnerKey`] (SHA-256 of the identity that opened the session), with an
//! idle lifetime that every use restarts. It never holds a session id or an identity in clear,
//! so a Redis dump or `MONITOR` reveals neither. Binding is first-writer-wins and atomic: once a
//! session is bound to one owner, no concurrent or later call can rebind it to another (the
//! Redis store does each read-decide-write in one Lua script).
//!
//! Forgetting a binding is safe (the session then answers 404 to everyone and the client opens
//! a new one), but the memory store still refuses new bindings when full rather than evicting
//! live ones, like the other stores: a client that can open sessions must not be able to end
//! other clients' sessions by opening many. Every store also bounds the sessions each caller
//! holds (`limits.max_sessions_per_caller`, decision 13): a caller at its bound gets
//! [`Binding::CallerFull`] and binds nothing more until one of its sessions ends or expires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use sha2::{Digest, Sha256};

use super::caller::{CallerBound, CallerFull, CallerKey, MemberIndex};
use super::replay::Clock;
use super::StoreError;

/// SHA-256 of a session id, as the backend issued it. Built only from the id's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey([u8; 32]);

impl SessionKey {
    /// The key of `session_id`.
    pub fn of(session_id: &[u8]) -> SessionKey {
        SessionKey(Sha256::digest(session_id).into())
    }

    /// The key of `session_id` on the MCP server `server`: the single server's (`default`)
    /// is [`SessionKey::of`], as it always was (bindings in Redis outlive an upgrade); another
    /// server's hashes its length-prefixed name first, so no id names a session on two servers.
    pub fn on(server: &str, session_id: &[u8]) -> SessionKey {
        if server == crate::config::DEFAULT_SERVER {
            return SessionKey::of(session_id);
        }
        let mut h = Sha256::new();
        h.update(b"portcullis-session-server-v1");
        h.update((server.len() as u64).to_be_bytes());
        h.update(server.as_bytes());
        h.update(session_id);
        SessionKey(h.finalize().into())
    }

    /// The first 12 hex digits: enough to follow one session through the logs, useless for
    /// using it. The only form of a session id that may be logged.
    pub fn log_prefix(&self) -> String {
        self.0[..6].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// base64url, for store keys.
    pub fn encoded(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    fn short(&self) -> u128 {
        first_128(&self.0)
    }
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionKey({}…)", self.log_prefix())
    }
}

/// SHA-256 of the identity that owns a session: (verified agent id, verified token issuer and
/// subject), each possibly absent. Two requests have the same key exactly when they have the
/// same verified identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerKey([u8; 32]);

impl OwnerKey {
    /// The key of an identity. Each part is length-prefixed and absence is its own tag, so no
    /// two different identities encode alike (agent "a" + no token ≠ no agent + subject "a").
    pub fn of(agent: Option<&str>, issuer: Option<&str>, subject: Option<&str>) -> OwnerKey {
        let mut h = Sha256::new();
        h.update(b"portcullis-session-owner-v1");
        for part in [agent, issuer, subject] {
            match part {
                None => h.update([0u8]),
                Some(p) => {
                    h.update([1u8]);
                    h.update((p.len() as u64).to_be_bytes());
                    h.update(p.as_bytes());
                }
            }
        }
        OwnerKey(h.finalize().into())
    }

    /// base64url, for store values.
    pub fn encoded(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    fn short(&self) -> u128 {
        first_128(&self.0)
    }
}

impl std::fmt::Debug for OwnerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerKey(…)")
    }
}

fn first_128(digest: &[u8; 32]) -> u128 {
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(first)
}

/// Whom a session is bound to, as seen by one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// No live binding: never bound, ended, or idle past its lifetime.
    Unbound,
    /// Bound to the caller's owner.
    Owner,
    /// Bound to another owner.
    Other,
    /// Not bound: the caller already holds as many sessions as it may (from `bind` only).
    CallerFull(CallerFull),
}

/// Session id → owner, with an idle lifetime. Shared by every request (and, for Redis, every
/// instance).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Runs when a backend response carries a session id: binds `session` to `owner` for `ttl`
    /// unless it is bound already. Returns `Owner` when the session is now bound to `owner`
    /// (by this call, or before it; the lifetime restarts) and `Other` when another owner holds
    /// it (nothing changes). Never `Unbound`. Among concurrent binds of one session to
    /// different owners, exactly one gets `Owner`. A new binding counts against
    /// `bound.caller`: one that holds `bound.max` live sessions gets `CallerFull` and nothing is
    /// bound. `Err`: nothing can be said; fail closed.
    async fn bind(&self, session: &SessionKey, owner: &OwnerKey, bound: &CallerBound, ttl: Duration) -> Result<Binding, StoreError>;

    /// Runs for every request that carries a session id: whom `session` is bound to. When it is
    /// `owner`, the binding's lifetime restarts at `ttl`; otherwise nothing changes.
    async fn verify(&self, session: &SessionKey, owner: &OwnerKey, ttl: Duration) -> Result<Binding, StoreError>;

    /// Runs after the backend accepted a DELETE of the session: removes the binding if `owner`
    /// holds it, freeing its slot of the caller that bound it. Returns whether a binding was
    /// removed.
    async fn unbind(&self, session: &SessionKey, owner: &OwnerKey) -> Result<bool, StoreError>;
}

/// The name used in store errors.
const STORE_NAME: &str = "memory session store";

/// Least time between two full sweeps of a full store (a sweep is O(bindings)).
const FULL_SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The single-process session store: one mutex-guarded map, bounded by `max_sessions`.
///
/// A binding is 48 bytes plus the map's overhead (the 128-bit prefixes of both digests: a
/// wrong "owner" needs a 128-bit second preimage): about 104 bytes measured at a million
/// bindings, so 10 MB per 100,000 sessions; the caller each binding counts against and its
/// entry in the per-caller index add about as much again (not measured). Expired bindings are
/// swept when the map has doubled since its last sweep, and when it is full (at most once per
/// second); a full store of live bindings refuses new sessions with an error.
pub struct MemorySessionStore {
    inner: Mutex<Sessions>,
    max_sessions: usize,
    clock: Clock,
}

#[derive(Default)]
struct Sessions {
    /// Session → (owner, expiry, the caller it counts against).
    map: HashMap<u128, (u128, Instant, CallerKey)>,
    /// Each caller's sessions, for `limits.max_sessions_per_caller`.
    callers: MemberIndex<u128, Instant>,
    size_at_last_sweep: usize,
    last_full_sweep: Option<Instant>,
}

impl Sessions {
    fn sweep(&mut self, now: Instant) {
        self.map.retain(|_, (_, expires, _)| *expires > now);
        self.callers.sweep(now);
        self.size_at_last_sweep = self.map.len();
    }

    /// The live binding of `session`, dropping it if it has expired.
    fn live(&mut self, session: u128, now: Instant) -> Option<&mut (u128, Instant, CallerKey)> {
        if let Some((_, _, caller)) = self.map.get(&session).filter(|(_, expires, _)| *expires <= now).copied() {
            self.map.remove(&session);
            self.callers.leave(&caller, &session);
        }
        self.map.get_mut(&session)
    }

    /// `session`'s binding (if live) now lives until `expires`, in the map and in its caller's count.
    fn extend(&mut self, session: u128, expires: Instant) {
        if let Some((_, e, caller)) = self.map.get_mut(&session) {
            *e = expires;
            let caller = *caller;
            self.callers.touch(&caller, &session, expires);
        }
    }
}

impl std::fmt::Debug for MemorySessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySessionStore").field("len", &self.len()).field("max_sessions", &self.max_sessions).finish()
    }
}

impl MemorySessionStore {
    /// A store holding at most `max_sessions` live bindings (`state.max_sessions`).
    pub fn new(max_sessions: usize) -> MemorySessionStore {
        Self::with_clock(max_sessions, Arc::new(Instant::now))
    }

    /// A store reading time from `clock` (tests move time by hand).
    pub fn with_clock(max_sessions: usize, clock: Clock) -> MemorySessionStore {
        MemorySessionStore { inner: Mutex::new(Sessions::default()), max_sessions: max_sessions.max(1), clock }
    }

    /// Bindings held now, live or not yet swept.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether no binding is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Sessions> {
        // Every operation is a single get, insert, remove or retain: a panic while holding the
        // lock leaves the map consistent, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `now + ttl`, saturating far in the future instead of overflowing.
fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

#[async_trait]
impl SessionStore for MemorySessionStore {
    async fn bind(&self, session: &SessionKey, owner: &OwnerKey, bound: &CallerBound, ttl: Duration) -> Result<Binding, StoreError> {
        let now = (self.clock)();
        let (session, owner) = (session.short(), owner.short());
        let mut s = self.lock();
        if let Some((holder, _, _)) = s.live(session, now) {
            if *holder != owner {
                return Ok(Binding::Other);
            }
            s.extend(session, expiry(now, ttl));
            return Ok(Binding::Owner);
        }
        if s.map.len() >= 2 * s.size_at_last_sweep.max(64) {
            s.sweep(now);
        }
        if s.map.len() >= self.max_sessions && s.last_full_sweep.is_none_or(|t| now.saturating_duration_since(t) >= FULL_SWEEP_EVERY) {
            s.sweep(now);
            s.last_full_sweep = Some(now);
        }
        if s.map.len() >= self.max_sessions {
            return Err(StoreError::Unavailable {
                store: STORE_NAME.into(),
                reason: format!("full: {} live sessions (state.max_sessions)", self.max_sessions),
            });
        }
        let expires = expiry(now, ttl);
        if let Err(first) = s.callers.admit(bound, &session, expires, now) {
            return Ok(Binding::CallerFull(CallerFull { retry_after: first.saturating_duration_since(now) }));
        }
        s.map.insert(session, (owner, expires, bound.caller));
        Ok(Binding::Owner)
    }

    async fn verify(&self, session: &SessionKey, owner: &OwnerKey, ttl: Duration) -> Result<Binding, StoreError> {
        let now = (self.clock)();
        let (session, owner) = (session.short(), owner.short());
        let mut s = self.lock();
        Ok(match s.live(session, now) {
            None => Binding::Unbound,
            Some((holder, _, _)) if *holder != owner => Binding::Other,
            Some(_) => {
                s.extend(session, expiry(now, ttl));
                Binding::Owner
            }
        })
    }

    async fn unbind(&self, session: &SessionKey, owner: &OwnerKey) -> Result<bool, StoreError> {
        let now = (self.clock)();
        let (session, owner) = (session.short(), owner.short());
        let mut s = self.lock();
        if let Some((_, _, caller)) = s.live(session, now).filter(|(holder, _, _)| *holder == owner).copied() {
            s.map.remove(&session);
            s.callers.leave(&caller, &session);
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
#[path = "session_contract.rs"]
pub(crate) mod contract;

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
