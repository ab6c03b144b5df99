//! The idempotency journal store (docs/design.md "Exactly-once tool calls"): per journal key,
//! either a call in flight or the complete answer it got.
//!
//! [`JournalStore::reserve`] is an atomic check-and-reserve: among concurrent first uses of a
//! key (on one instance, or on several sharing Redis) exactly one reserves it; the others see
//! the reservation. Only the holder of a reservation (its [`Ticket`]) can turn it into a
//! recorded answer or release it, so a late holder whose reservation expired cannot overwrite
//! someone else's. A store that cannot answer says so ([`StoreError`]), never "reserved": the
//! caller refuses, because a second execution is worse than a 503.
//!
//! The memory store is bounded by entry count and by recorded bytes; at either bound it
//! refuses (a reservation: 503; a recording: the answer is passed on unrecorded) rather than
//! forget a live entry, since forgetting one lets a retry execute again. Every store also
//! bounds the entries of each caller (`idempotency.max_entries_per_caller`, decision 13): a
//! caller at its bound gets [`Reserve::CallerFull`] and no one else is affected.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::caller::{CallerBound, CallerFull, MemberIndex};
use super::replay::Clock;
use super::StoreError;

/// A reservation: the journal key, the fingerprint (call digest) of the call that holds it, and
/// a random token naming this holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The journal key (already a digest of the identity and the `Idempotency-Key`).
    pub key: String,
    /// The call digest of the request that reserves it.
    pub fingerprint: [u8; 32],
    /// Names this holder: only it may record or release.
    pub token: String,
    /// The caller the entry counts against, and how many it may hold.
    pub bound: CallerBound,
}

/// The complete answer of a call, as recorded and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedAnswer {
    /// The backend's HTTP status.
    pub status: u16,
    /// The backend's `Content-Type`.
    pub content_type: Option<String>,
    /// The whole body: a JSON-RPC response, or the whole SSE stream.
    pub body: Bytes,
    /// The JSON-RPC id of the request that was answered, as JSON text (replays rewrite it).
    pub id: Option<String>,
    /// The `progressToken` of that request, as JSON text (replays rewrite or drop its
    /// progress notifications).
    pub progress_token: Option<String>,
}

/// What the journal holds for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A call with this fingerprint holds the key and has no answer yet.
    InFlight {
        /// Its call digest.
        fingerprint: [u8; 32],
    },
    /// A call with this fingerprint was answered.
    Recorded {
        /// Its call digest.
        fingerprint: [u8; 32],
        /// The answer.
        answer: Arc<RecordedAnswer>,
    },
}

impl Entry {
    /// The call digest of the call that made the entry.
    pub fn fingerprint(&self) -> &[u8; 32] {
        match self {
            Entry::InFlight { fingerprint } | Entry::Recorded { fingerprint, .. } => fingerprint,
        }
    }
}

/// The result of [`JournalStore::reserve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserve {
    /// The key was free: the ticket holds it now (in flight).
    Reserved,
    /// The key is taken; the live entry, unchanged.
    Taken(Entry),
    /// The key was free, but the caller holds `ticket.bound.max` live entries: nothing was
    /// reserved.
    CallerFull(CallerFull),
}

/// The journal: one entry per key, shared by every request (and, on Redis, every instance).
#[async_trait]
pub trait JournalStore: Send + Sync {
    /// Runs once per request whose policy decision names idempotency and that carries a key,
    /// before it is forwarded. If `ticket.key` has no live entry, records an in-flight entry
    /// for `ticket` living `in_flight_ttl` and returns [`Reserve::Reserved`]; otherwise returns
    /// the live entry. Atomic: of concurrent calls for one key, exactly one reserves it. A free
    /// key is reserved only while `ticket.bound.caller` holds fewer than `ticket.bound.max` live
    /// entries (counted exactly, across instances); otherwise [`Reserve::CallerFull`].
    async fn reserve(&self, ticket: &Ticket, in_flight_ttl: Duration) -> Result<Reserve, StoreError>;

    /// Runs when the reserved call's answer is complete: replaces `ticket`'s in-flight entry
    /// with `answer`, living `ttl`. `Ok(false)`: the key is not (any longer) held by this
    /// ticket, and nothing was recorded. `Err`: the store could not record it (down, full).
    async fn complete(&self, ticket: &Ticket, answer: &RecordedAnswer, ttl: Duration) -> Result<bool, StoreError>;

    /// Runs when the reserved call got no answer to record (backend unreachable, stream cut,
    /// answer too large): removes `ticket`'s in-flight entry so a retry is forwarded.
    /// `Ok(false)`: it was not (any longer) this ticket's.
    async fn release(&self, ticket: &Ticket) -> Result<bool, StoreError>;
}

// ---------------------------------------------------------------------------------------------
// Memory store
// ---------------------------------------------------------------------------------------------

/// The single-process journal: a map of key → entry with expiry, bounded by `max_entries`
/// entries and `max_bytes` of recorded answers. Expired entries are swept when a bound is hit.
pub struct MemoryJournalStore {
    inner: Mutex<Slots>,
    max_entries: usize,
    max_bytes: u64,
    clock: Clock,
}

#[derive(Default)]
struct Slots {
    map: HashMap<String, Slot>,
    bytes: u64,
    /// Each caller's keys, for `idempotency.max_entries_per_caller`.
    callers: MemberIndex<String, Instant>,
}

struct Slot {
    fingerprint: [u8; 32],
    state: SlotState,
    expires: Instant,
}

enum SlotState {
    InFlight { token: String },
    Recorded(Arc<RecordedAnswer>),
}

impl Slot {
    fn bytes(&self) -> u64 {
        match &self.state {
            SlotState::InFlight { .. } => 0,
            SlotState::Recorded(a) => answer_bytes(a),
        }
    }
}

fn answer_bytes(a: &RecordedAnswer) -> u64 {
    let text = a.content_type.as_ref().map_or(0, String::len) + a.id.as_ref().map_or(0, String::len) + a.progress_token.as_ref().map_or(0, String::len);
    (a.body.len() + text) as u64
}

const STORE_NAME: &str = "memory idempotency journal";

impl std::fmt::Debug for MemoryJournalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryJournalStore").field("max_entries", &self.max_entries).field("max_bytes", &self.max_bytes).finish_non_exhaustive()
    }
}

impl MemoryJournalStore {
    /// A journal of at most `max_entries` entries and `max_bytes` of recorded answers
    /// (`idempotency.max_entries`, `idempotency.max_bytes`).
    pub fn new(max_entries: usize, max_bytes: u64) -> Self {
        Self::with_clock(max_entries, max_bytes, Arc::new(Instant::now))
    }

    /// A journal reading time from `clock` (tests move time by hand).
    pub fn with_clock(max_entries: usize, max_bytes: u64, clock: Clock) -> Self {
        MemoryJournalStore { inner: Mutex::new(Slots::default()), max_entries, max_bytes, clock }
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        // Every operation leaves the map and the byte count consistent before it can panic.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn full(&self, what: &str) -> StoreError {
        StoreError::Unavailable { store: STORE_NAME.into(), reason: format!("full: {what}") }
    }

    fn expiry(&self, now: Instant, ttl: Duration) -> Result<Instant, StoreError> {
        now.checked_add(ttl).ok_or_else(|| StoreError::Unavailable { store: STORE_NAME.into(), reason: format!("ttl {ttl:?} too large") })
    }
}

impl Slots {
    fn sweep(&mut self, now: Instant) {
        let mut freed = 0;
        self.map.retain(|_, s| {
            let live = s.expires > now;
            if !live {
                freed += s.bytes();
            }
            live
        });
        self.bytes -= freed;
        self.callers.sweep(now);
    }

    /// The live slot for `key` held by `token`, if any.
    fn held(&mut self, key: &str, token: &str, now: Instant) -> Option<&mut Slot> {
        self.map.get_mut(key).filter(|s| s.expires > now && matches!(&s.state, SlotState::InFlight { token: t } if t == token))
    }
}

#[async_trait]
impl JournalStore for MemoryJournalStore {
    async fn reserve(&self, ticket: &Ticket, in_flight_ttl: Duration) -> Result<Reserve, StoreError> {
        let now = (self.clock)();
        let expires = self.expiry(now, in_flight_ttl)?;
        let mut slots = self.slots();
        if let Some(slot) = slots.map.get(&ticket.key).filter(|s| s.expires > now) {
            let entry = match &slot.state {
                SlotState::InFlight { .. } => Entry::InFlight { fingerprint: slot.fingerprint },
                SlotState::Recorded(a) => Entry::Recorded { fingerprint: slot.fingerprint, answer: a.clone() },
            };
            return Ok(Reserve::Taken(entry));
        }
        if slots.map.len() >= self.max_entries {
            slots.sweep(now);
            if slots.map.len() >= self.max_entries {
                return Err(self.full(&format!("{} live entries (idempotency.max_entries)", self.max_entries)));
            }
        }
        if let Err(first) = slots.callers.admit(&ticket.bound, &ticket.key, expires, now) {
            return Ok(Reserve::CallerFull(CallerFull { retry_after: first.saturating_duration_since(now) }));
        }
        // An expired entry for this key is replaced: its bytes are given back first.
        if let Some(old) = slots.map.remove(&ticket.key) {
            slots.bytes -= old.bytes();
        }
        let slot = Slot { fingerprint: ticket.fingerprint, state: SlotState::InFlight { token: ticket.token.clone() }, expires };
        slots.map.insert(ticket.key.clone(), slot);
        Ok(Reserve::Reserved)
    }

    async fn complete(&self, ticket: &Ticket, answer: &RecordedAnswer, ttl: Duration) -> Result<bool, StoreError> {
        let now = (self.clock)();
        let expires = self.expiry(now, ttl)?;
        let size = answer_bytes(answer);
        let mut slots = self.slots();
        if slots.held(&ticket.key, &ticket.token, now).is_none() {
            return Ok(false);
        }
        if slots.bytes + size > self.max_bytes {
            slots.sweep(now);
            if slots.bytes + size > self.max_bytes {
                return Err(self.full(&format!("{} bytes of recorded answers (idempotency.max_bytes)", self.max_bytes)));
            }
        }
        let Some(slot) = slots.held(&ticket.key, &ticket.token, now) else { return Ok(false) };
        slot.state = SlotState::Recorded(Arc::new(answer.clone()));
        slot.expires = expires;
        slots.bytes += size;
        slots.callers.touch(&ticket.bound.caller, &ticket.key, expires);
        Ok(true)
    }

    async fn release(&self, ticket: &Ticket) -> Result<bool, StoreError> {
        let now = (self.clock)();
        let mut slots = self.slots();
        if slots.held(&ticket.key, &ticket.token, now).is_none() {
            return Ok(false);
        }
        slots.map.remove(&ticket.key);
        slots.callers.leave(&ticket.bound.caller, &ticket.key);
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// The wire form of an entry (the Redis store keeps entries as strings)
// ---------------------------------------------------------------------------------------------

/// `P:<fingerprint hex>:<token>` for an in-flight entry: the exact value the holder compares
/// against to record or release.
pub(crate) fn in_flight_value(ticket: &Ticket) -> String {
    format!("P:{}:{}", hex(&ticket.fingerprint), ticket.token)
}

/// `D:<fingerprint hex>:<answer JSON>` for a recorded entry.
pub(crate) fn recorded_value(fingerprint: &[u8; 32], answer: &RecordedAnswer) -> Result<String, String> {
    let wire = WireAnswer {
        status: answer.status,
        content_type: answer.content_type.clone(),
        body: base64::engine::general_purpose::STANDARD.encode(&answer.body),
        id: answer.id.clone(),
        progress_token: answer.progress_token.clone(),
    };
    let json = serde_json::to_string(&wire).map_err(|e| format!("cannot encode the answer: {e}"))?;
    Ok(format!("D:{}:{json}", hex(fingerprint)))
}

/// Reads a stored entry back.
pub(crate) fn parse_value(value: &str) -> Result<Entry, String> {
    let bad = || "malformed journal entry".to_owned();
    let (kind, rest) = value.split_at_checked(2).ok_or_else(bad)?;
    let (fp, rest) = rest.split_at_checked(64).ok_or_else(bad)?;
    let fingerprint = unhex(fp).ok_or_else(bad)?;
    let payload = rest.strip_prefix(':').ok_or_else(bad)?;
    match kind {
        "P:" => Ok(Entry::InFlight { fingerprint }),
        "D:" => {
            let w: WireAnswer = serde_json::from_str(payload).map_err(|_| bad())?;
            let body = base64::engine::general_purpose::STANDARD.decode(w.body).map_err(|_| bad())?;
            let answer = RecordedAnswer { status: w.status, content_type: w.content_type, body: Bytes::from(body), id: w.id, progress_token: w.progress_token };
            Ok(Entry::Recorded { fingerprint, answer: Arc::new(answer) })
        }
        _ => Err(bad()),
    }
}

#[derive(Serialize, Deserialize)]
struct WireAnswer {
    status: u16,
    content_type: Option<String>,
    body: String,
    id: Option<String>,
    progress_token: Option<String>,
}

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
#[path = "journal_contract.rs"]
pub(crate) mod contract;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::state::caller::CallerKey;

    /// A clock the test moves by hand, and a "sleep" that moves it.
    fn manual_clock() -> (Clock, Arc<AtomicU64>) {
        let start = Instant::now();
        let offset = Arc::new(AtomicU64::new(0));
        let o = offset.clone();
        (Arc::new(move || start + Duration::from_millis(o.load(Ordering::SeqCst))), offset)
    }

    #[tokio::test]
    async fn memory_store_meets_the_journal_contract() {
        let (clock, offset) = manual_clock();
        let s = Arc::new(MemoryJournalStore::with_clock(10_000, 1 << 20, clock));
        contract::every_case_but_expiry(s.clone()).await;
        let advance = move |d: Duration| {
            offset.fetch_add(d.as_millis() as u64, Ordering::SeqCst);
            std::future::ready(())
        };
        contract::entries_expire_after_their_ttl(s.as_ref(), Duration::from_secs(2), advance).await;
    }

    #[tokio::test]
    async fn memory_store_is_bounded_by_entries_and_bytes() {
        let (clock, offset) = manual_clock();
        let s = MemoryJournalStore::with_clock(2, 100, clock);
        let ticket = |k: &str| Ticket { key: k.into(), fingerprint: [1; 32], token: format!("t-{k}"), bound: CallerBound::new(CallerKey::agent("a"), 100) };
        let minute = Duration::from_secs(60);
        assert_eq!(s.reserve(&ticket("a"), minute).await.unwrap(), Reserve::Reserved);
        assert_eq!(s.reserve(&ticket("b"), minute).await.unwrap(), Reserve::Reserved);
        let err = s.reserve(&ticket("c"), minute).await.unwrap_err();
        assert!(err.to_string().contains("idempotency.max_entries"), "{err}");
        let big = RecordedAnswer { status: 200, content_type: None, body: Bytes::from(vec![b'x'; 80]), id: None, progress_token: None };
        assert!(s.complete(&ticket("a"), &big, minute).await.unwrap());
        let err = s.complete(&ticket("b"), &big, minute).await.unwrap_err();
        assert!(err.to_string().contains("idempotency.max_bytes"), "{err}");
        // Once entries expire, their room is given back.
        offset.fetch_add(61_000, Ordering::SeqCst);
        assert_eq!(s.reserve(&ticket("c"), minute).await.unwrap(), Reserve::Reserved);
        assert!(s.complete(&ticket("c"), &big, minute).await.unwrap());
    }

    #[test]
    fn entries_round_trip_through_their_wire_form() {
        let t = Ticket { key: "k".into(), fingerprint: [0xab; 32], token: "tok".into(), bound: CallerBound::new(CallerKey::agent("a"), 1) };
        assert_eq!(parse_value(&in_flight_value(&t)).unwrap(), Entry::InFlight { fingerprint: [0xab; 32] });
        let a = RecordedAnswer {
            status: 200,
            content_type: Some("text/event-stream".into()),
            body: Bytes::from_static(b"data: {}\n\n\xff"),
            id: Some("7".into()),
            progress_token: Some("\"p\"".into()),
        };
        let v = recorded_value(&t.fingerprint, &a).unwrap();
        assert_eq!(parse_value(&v).unwrap(), Entry::Recorded { fingerprint: [0xab; 32], answer: Arc::new(a) });
        assert!(parse_value("X:").is_err());
        assert!(parse_value(&format!("D:{}:not json", "ab".repeat(32))).is_err());
    }
}
