//! Approval records (docs/approvals.md): one per binding (token `sub`, agent id, call digest),
//! reached by the link's code. A record is pending until the person decides; an approved record
//! is consumed by exactly one retry of the call, a denied one refuses retries until it expires.
//!
//! Every read-decide-write is one step: under one lock in memory, one Lua script on Redis
//! (`redis::approval`), so 50 concurrent retries, or retries on several instances, consume an
//! approval once.
//!
//! Pending records are also bounded per caller (`approvals.max_pending_per_caller`, decision
//! 13): a caller with that many links awaiting a person gets [`Ask::CallerFull`] and no new
//! link; a decision or the link's expiry frees the slot.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::caller::{CallerBound, CallerFull, CallerKey, MemberIndex};
use super::StoreError;
use portcullis_wire::UnixTime;

/// Most records the memory store holds; past it (after dropping expired ones) new links fail
/// closed (503) rather than grow without bound. `approvals.max_pending_per_caller` is at most
/// this (config keeps its own copy: config sits below state).
pub const MAX_MEMORY_RECORDS: usize = 100_000;

/// What a person is asked to approve, and what the retry must match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The approval's id (the elicitation id, the decision log's `approval_id`).
    pub id: String,
    /// The link's code (32 random bytes, base64url).
    pub code: String,
    /// The user who delegated: the only person who may decide.
    pub sub: String,
    /// The verified agent id (empty when the request was unsigned and signatures optional).
    pub agent: String,
    /// The agent's keyid, for the page.
    pub keyid: String,
    /// `tools/call`, `resources/read` or `prompts/get`.
    pub method: String,
    /// The tool, resource or prompt, as the page shows it (a JSON string, `approval::shown`).
    pub target: String,
    /// The arguments as the page shows them: whole, indented JSON (`approval::shown`).
    pub arguments: String,
    /// The policy's message.
    pub message: String,
    /// Unix seconds after which the link is dead.
    pub expires: u64,
    /// The MCP server the call is for (`default` in the single-server form; records stored
    /// before servers existed read as that).
    #[serde(default = "default_server")]
    pub server: String,
}

fn default_server() -> String {
    crate::config::DEFAULT_SERVER.to_owned()
}

/// The store key of one binding: base64url(SHA-256(sub, agent, call digest)), so the store
/// never holds the identity in its key names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BindingKey(String);

impl BindingKey {
    /// The key for (`sub`, `agent`, `digest_hex`). Lengths are hashed in so no two triples share
    /// a key.
    pub fn new(sub: &str, agent: &str, digest_hex: &str) -> BindingKey {
        let mut h = Sha256::new();
        for part in [sub, agent, digest_hex] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        BindingKey(URL_SAFE_NO_PAD.encode(h.finalize()))
    }

    /// The encoded key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What asking about a binding found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// No live record: the fresh one was stored, pending.
    Issued,
    /// A pending record already exists: its link is the answer again.
    Pending(ApprovalRecord),
    /// The person approved: this caller consumed the approval (no other caller will).
    Approved {
        /// The consumed record.
        record: ApprovalRecord,
        /// The approver's `sub`.
        approved_by: String,
    },
    /// The person denied it; retries are refused until the record expires.
    Denied(ApprovalRecord),
    /// No live record, and the caller already has as many pending records as it may: nothing
    /// was stored.
    CallerFull(CallerFull),
}

/// A decision a person made on the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Approve the call.
    Approve,
    /// Deny it.
    Deny,
}

impl Choice {
    /// The stored state name.
    pub fn as_str(self) -> &'static str {
        match self {
            Choice::Approve => "approved",
            Choice::Deny => "denied",
        }
    }
}

/// Approval records, shared by every instance using the same store.
#[async_trait::async_trait]
pub trait ApprovalStore: Send + Sync {
    /// For a call that needs approval: the binding's live record (consuming it when approved),
    /// or `fresh` stored as pending when there is none and `bound.caller` has fewer than
    /// `bound.max` pending records (else [`Ask::CallerFull`]; counted exactly across instances).
    async fn ask(&self, binding: &BindingKey, fresh: &ApprovalRecord, bound: &CallerBound, now: UnixTime) -> Result<Ask, StoreError>;

    /// The pending, unexpired record the code points at. Unknown, expired, used, denied and
    /// superseded codes are all `None`.
    async fn pending(&self, code: &str, now: UnixTime) -> Result<Option<ApprovalRecord>, StoreError>;

    /// Records the person's choice if the record is still pending (freeing its slot of the
    /// caller's pending records); `false` otherwise.
    async fn decide(&self, code: &str, choice: Choice, by: &str, now: UnixTime) -> Result<bool, StoreError>;
}

#[derive(Debug)]
struct Entry {
    record: ApprovalRecord,
    state: State,
    /// Whom the record counts against while pending.
    caller: CallerKey,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Pending,
    Approved(String),
    Denied,
}

#[derive(Debug, Default)]
struct Tables {
    by_binding: HashMap<BindingKey, Entry>,
    by_code: HashMap<String, BindingKey>,
    /// Each caller's pending records (expiry in Unix seconds).
    pending: MemberIndex<BindingKey, u64>,
}

impl Tables {
    fn drop_expired(&mut self, now: UnixTime) {
        self.by_binding.retain(|_, e| e.record.expires > now.secs());
        self.pending.sweep(now.secs());
        let live = &self.by_binding;
        self.by_code.retain(|code, b| live.get(b).is_some_and(|e| &e.record.code == code));
    }

    fn live(&self, code: &str, now: UnixTime) -> Option<&Entry> {
        let entry = self.by_binding.get(self.by_code.get(code)?)?;
        (entry.record.code == code && entry.record.expires > now.secs()).then_some(entry)
    }
}

/// The in-process store: every operation under one lock.
#[derive(Debug)]
pub struct MemoryApprovalStore {
    tables: Mutex<Tables>,
    max: usize,
}

impl MemoryApprovalStore {
    /// A store of at most `max` records.
    pub fn new(max: usize) -> MemoryApprovalStore {
        MemoryApprovalStore { tables: Mutex::new(Tables::default()), max: max.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait::async_trait]
impl ApprovalStore for MemoryApprovalStore {
    async fn ask(&self, binding: &BindingKey, fresh: &ApprovalRecord, bound: &CallerBound, now: UnixTime) -> Result<Ask, StoreError> {
        let mut t = self.lock();
        if let Some(e) = t.by_binding.get(binding).filter(|e| e.record.expires > now.secs()) {
            match &e.state {
                State::Pending => return Ok(Ask::Pending(e.record.clone())),
                State::Denied => return Ok(Ask::Denied(e.record.clone())),
                State::Approved(by) => {
                    let by = by.clone();
                    let Some(e) = t.by_binding.remove(binding) else { return Ok(Ask::Issued) };
                    t.by_code.remove(&e.record.code);
                    return Ok(Ask::Approved { record: e.record, approved_by: by });
                }
            }
        }
        if t.by_binding.len() >= self.max {
            t.drop_expired(now);
            if t.by_binding.len() >= self.max {
                return Err(StoreError::Unavailable { store: "memory".to_owned(), reason: format!("{} approval records held (the most it keeps)", self.max) });
            }
        }
        if let Err(first) = t.pending.admit(bound, binding, fresh.expires, now.secs()) {
            return Ok(Ask::CallerFull(CallerFull { retry_after: std::time::Duration::from_secs(first.saturating_sub(now.secs()).max(1)) }));
        }
        if let Some(old) = t.by_binding.insert(binding.clone(), Entry { record: fresh.clone(), state: State::Pending, caller: bound.caller }) {
            t.by_code.remove(&old.record.code);
        }
        t.by_code.insert(fresh.code.clone(), binding.clone());
        Ok(Ask::Issued)
    }

    async fn pending(&self, code: &str, now: UnixTime) -> Result<Option<ApprovalRecord>, StoreError> {
        let t = self.lock();
        Ok(t.live(code, now).filter(|e| e.state == State::Pending).map(|e| e.record.clone()))
    }

    async fn decide(&self, code: &str, choice: Choice, by: &str, now: UnixTime) -> Result<bool, StoreError> {
        let mut t = self.lock();
        if t.live(code, now).is_none_or(|e| e.state != State::Pending) {
            return Ok(false);
        }
        let Some(binding) = t.by_code.get(code).cloned() else { return Ok(false) };
        let Some(e) = t.by_binding.get_mut(&binding) else { return Ok(false) };
        e.state = match choice {
            Choice::Approve => State::Approved(by.to_owned()),
            Choice::Deny => State::Denied,
        };
        let caller = e.caller;
        t.pending.leave(&caller, &binding);
        Ok(true)
    }
}

/// The behaviour every approval store must show (run against memory and Redis).
#[cfg(test)]
pub(crate) mod contract {
    use super::*;

    /// A caller with room for every record a case asks for.
    pub(crate) fn roomy() -> CallerBound {
        CallerBound::new(CallerKey::user("https://issuer.example", "user-1842"), 10_000)
    }

    pub(crate) fn record(code: &str, expires: u64) -> ApprovalRecord {
        ApprovalRecord {
            id: format!("id-{code}"),
            code: code.to_owned(),
            sub: "user-1842".to_owned(),
            agent: "https://agent.example".to_owned(),
            keyid: "k1".to_owned(),
            method: "tools/call".to_owned(),
            target: "payments.send".to_owned(),
            arguments: "{\"amount\":500}".to_owned(),
            message: "Send 500 USD?".to_owned(),
            expires,
            server: "default".to_owned(),
        }
    }

    /// One pending link per binding; approved → consumed once; unknown/used codes look alike.
    pub(crate) async fn a_binding_has_one_link_and_is_consumed_once(store: &dyn ApprovalStore) {
        let now = UnixTime(std::time::Duration::from_secs(1_000));
        let b = BindingKey::new("user-1842", "https://agent.example", &format!("{:064}", uuid::Uuid::new_v4().as_u128()));
        let first = record(&format!("c1-{}", uuid::Uuid::new_v4()), 2_000);
        assert_eq!(store.ask(&b, &first, &roomy(), now).await.unwrap(), Ask::Issued);
        let second = record(&format!("c2-{}", uuid::Uuid::new_v4()), 2_000);
        assert_eq!(store.ask(&b, &second, &roomy(), now).await.unwrap(), Ask::Pending(first.clone()), "asking again returns the same link");
        assert_eq!(store.pending(&first.code, now).await.unwrap(), Some(first.clone()));
        assert_eq!(store.pending(&second.code, now).await.unwrap(), None, "the second code was never issued");
        assert!(store.decide(&first.code, Choice::Approve, "user-1842", now).await.unwrap());
        assert!(!store.decide(&first.code, Choice::Deny, "user-1842", now).await.unwrap(), "decided once");
        assert_eq!(store.pending(&first.code, now).await.unwrap(), None, "an approved code is no longer pending");
        assert_eq!(store.ask(&b, &second, &roomy(), now).await.unwrap(), Ask::Approved { record: first.clone(), approved_by: "user-1842".to_owned() });
        assert_eq!(store.ask(&b, &second, &roomy(), now).await.unwrap(), Ask::Issued, "consumed: the next call needs a new approval");
        assert!(!store.decide(&first.code, Choice::Approve, "user-1842", now).await.unwrap(), "the used code is dead");
        assert_eq!(store.pending(&second.code, now).await.unwrap(), Some(second));
    }

    /// A denied record refuses retries; an expired one is gone.
    pub(crate) async fn denied_refuses_and_expired_is_dead(store: &dyn ApprovalStore) {
        let now = UnixTime(std::time::Duration::from_secs(1_000));
        let b = BindingKey::new("user-1842", "https://agent.example", &format!("{:064}", uuid::Uuid::new_v4().as_u128()));
        let r = record(&format!("d-{}", uuid::Uuid::new_v4()), 1_060);
        assert_eq!(store.ask(&b, &r, &roomy(), now).await.unwrap(), Ask::Issued);
        assert!(store.decide(&r.code, Choice::Deny, "user-1842", now).await.unwrap());
        assert_eq!(store.ask(&b, &record("other", 2_000), &roomy(), now).await.unwrap(), Ask::Denied(r.clone()));
        let later = UnixTime(std::time::Duration::from_secs(1_061));
        assert_eq!(store.pending(&r.code, later).await.unwrap(), None);
        let b2 = BindingKey::new("user-1842", "https://agent.example", &format!("{:064}", uuid::Uuid::new_v4().as_u128()));
        let e = record(&format!("e-{}", uuid::Uuid::new_v4()), 1_060);
        assert_eq!(store.ask(&b2, &e, &roomy(), now).await.unwrap(), Ask::Issued);
        assert_eq!(store.pending(&e.code, later).await.unwrap(), None, "expired");
        assert!(!store.decide(&e.code, Choice::Approve, "user-1842", later).await.unwrap(), "an expired code cannot be approved");
    }

    /// Decision 13: a caller with `max` pending records gets no new link (and is told when its
    /// first expires) while others go on; asking again about a pending call still answers with
    /// its link; a decision frees the slot, and so does expiry.
    pub(crate) async fn each_caller_is_bounded_and_others_are_unaffected(store: &dyn ApprovalStore) {
        let now = UnixTime(std::time::Duration::from_secs(1_000));
        let run = uuid::Uuid::new_v4();
        let mallory = CallerBound::new(CallerKey::user("https://issuer.example", &format!("mallory-{run}")), 2);
        let b = |i: u32| BindingKey::new(&format!("mallory-{run}"), "https://agent.example", &format!("{i:064}"));
        let r = |i: u32, exp: u64| record(&format!("m{i}-{run}"), exp);
        assert_eq!(store.ask(&b(1), &r(1, 1_060), &mallory, now).await.unwrap(), Ask::Issued);
        assert_eq!(store.ask(&b(2), &r(2, 2_000), &mallory, now).await.unwrap(), Ask::Issued);
        let full = store.ask(&b(3), &r(3, 2_000), &mallory, now).await.unwrap();
        assert_eq!(full, Ask::CallerFull(CallerFull { retry_after: std::time::Duration::from_secs(60) }), "the first link expires in 60 s");
        assert_eq!(store.pending(&r(3, 2_000).code, now).await.unwrap(), None, "no link was stored");
        assert_eq!(store.ask(&b(1), &r(9, 2_000), &mallory, now).await.unwrap(), Ask::Pending(r(1, 1_060)), "a pending call still gets its link");
        let alice = CallerBound::new(CallerKey::user("https://issuer.example", &format!("alice-{run}")), 2);
        let a = BindingKey::new(&format!("alice-{run}"), "https://agent.example", "00");
        assert_eq!(store.ask(&a, &record(&format!("a-{run}"), 2_000), &alice, now).await.unwrap(), Ask::Issued, "another caller is unaffected");
        assert!(store.decide(&r(2, 2_000).code, Choice::Deny, "x", now).await.unwrap());
        assert_eq!(store.ask(&b(3), &r(3, 2_000), &mallory, now).await.unwrap(), Ask::Issued, "a decided record frees its slot");
        assert!(matches!(store.ask(&b(4), &r(4, 2_000), &mallory, now).await.unwrap(), Ask::CallerFull(_)));
        let later = UnixTime(std::time::Duration::from_secs(1_061));
        assert_eq!(store.ask(&b(4), &r(4, 2_000), &mallory, later).await.unwrap(), Ask::Issued, "an expired link frees its slot");
    }

    /// Every case of this contract against one shared store.
    pub(crate) async fn every_case(store: std::sync::Arc<dyn ApprovalStore>) {
        a_binding_has_one_link_and_is_consumed_once(store.as_ref()).await;
        denied_refuses_and_expired_is_dead(store.as_ref()).await;
        each_caller_is_bounded_and_others_are_unaffected(store.as_ref()).await;
        concurrent_retries_consume_once(store).await;
    }

    /// Many concurrent retries of an approved call: exactly one consumes it.
    pub(crate) async fn concurrent_retries_consume_once(store: std::sync::Arc<dyn ApprovalStore>) {
        let now = UnixTime(std::time::Duration::from_secs(1_000));
        let b = BindingKey::new("user-1842", "https://agent.example", &format!("{:064}", uuid::Uuid::new_v4().as_u128()));
        let r = record(&format!("r-{}", uuid::Uuid::new_v4()), 2_000);
        store.ask(&b, &r, &roomy(), now).await.unwrap();
        assert!(store.decide(&r.code, Choice::Approve, "user-1842", now).await.unwrap());
        let mut tasks = Vec::new();
        for i in 0..50 {
            let (store, b) = (store.clone(), b.clone());
            tasks.push(tokio::spawn(async move { store.ask(&b, &record(&format!("n{i}-{}", uuid::Uuid::new_v4()), 2_000), &roomy(), now).await.unwrap() }));
        }
        let mut approved = 0;
        for t in tasks {
            if matches!(t.await.unwrap(), Ask::Approved { .. }) {
                approved += 1;
            }
        }
        assert_eq!(approved, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_store_meets_the_contract() {
        contract::every_case(std::sync::Arc::new(MemoryApprovalStore::new(1_000))).await;
    }

    #[tokio::test]
    async fn a_full_memory_store_fails_closed() {
        let s = MemoryApprovalStore::new(1);
        let now = UnixTime(std::time::Duration::from_secs(1_000));
        s.ask(&BindingKey::new("a", "b", "c"), &contract::record("one", 2_000), &contract::roomy(), now).await.unwrap();
        assert!(s.ask(&BindingKey::new("a", "b", "d"), &contract::record("two", 2_000), &contract::roomy(), now).await.is_err());
        // Once the first expired, there is room again.
        assert_eq!(
            s.ask(&BindingKey::new("a", "b", "d"), &contract::record("two", 3_000), &contract::roomy(), UnixTime(std::time::Duration::from_secs(2_001)))
                .await
                .unwrap(),
            Ask::Issued
        );
    }

    #[test]
    fn binding_keys_differ_for_shifted_parts() {
        assert_ne!(BindingKey::new("ab", "c", "d"), BindingKey::new("a", "bc", "d"));
    }
}
