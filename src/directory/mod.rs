//! Key resolution (PRODUCT.md stage 4): `Signature-Agent` → key directory → the Ed25519 key
//! whose RFC 7638 thumbprint equals the signature's `keyid`, or a static key from config.
//!
//! Decides which key, if any, may verify a signature; it does not verify anything itself.
//! Trusts: the operator's `signatures.keys` and `signatures.trusted_agents`, and directory
//! documents fetched over HTTPS from an allow-listed origin (spec/README.md §5.3). It never
//! trusts a directory's `kid`: the thumbprint is computed here. Lookup is on the pair
//! (directory URL, keyid), never keyid alone.
//!
//! Caching (WBA "Cache Behaviour", "Discovery Failure"): a document is fresh for its
//! `Cache-Control: max-age`, clamped to `directory_min_ttl`..`directory_max_ttl`. A refetched
//! document that lacks a key revokes it; a failed refetch is not evidence and evicts nothing.
//! A directory is fetched by at most one request at a time (single flight), at most once per
//! `directory_min_ttl` after an attempt (so unknown keyids and a failing directory cannot cause
//! a fetch storm). Time is passed in by the caller.

mod document;
mod fetch;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use url::Url;

use crate::config::{FieldError, RawSignatures};
use crate::pipeline::UnixTime;
use crate::signature::{ed25519_thumbprint, verifying_key_from_jwk, AgentKind, AgentRef};
use crate::telemetry::FetchLabels;

pub use fetch::{parse_key_set, DirectoryKey, KeySet, DIRECTORY_MEDIA_TYPE, MAX_DIRECTORY_BYTES, MAX_DIRECTORY_KEYS, WELL_KNOWN_PATH};
use fetch::{Fetch, HttpFetch};

/// Why no key could be resolved for a signature. Every variant refuses the request (401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    /// The signature names no `Signature-Agent` and its keyid is not a static key.
    #[error("signature names no Signature-Agent and keyid {keyid} is not a configured static key")]
    NoAgent {
        /// The signature's keyid.
        keyid: String,
    },
    /// The agent's origin is not in `signatures.trusted_agents`: its directory is never fetched.
    #[error("agent origin {origin} is not in signatures.trusted_agents")]
    UntrustedOrigin {
        /// The normalized origin.
        origin: String,
    },
    /// The `Signature-Agent` type is one this gateway does not resolve (`cimd`).
    #[error("Signature-Agent type {0} is not supported")]
    UnsupportedAgentType(&'static str),
    /// The directory could not be fetched (DNS, connect, TLS, timeout, broken body).
    #[error("key directory {url} unreachable: {reason}")]
    Unreachable {
        /// The URL fetched.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The directory answered with a status other than 200 (redirects included: WBA forbids
    /// following them).
    #[error("key directory {url} answered {status}, not 200")]
    BadStatus {
        /// The URL fetched.
        url: String,
        /// The status received.
        status: u16,
    },
    /// The directory's `Content-Type` is not the directory (or JWKS) media type.
    #[error("key directory {url} has media type {content_type:?}")]
    BadMediaType {
        /// The URL fetched.
        url: String,
        /// The `Content-Type` received (empty when absent).
        content_type: String,
    },
    /// The document is larger than the size cap.
    #[error("key directory {url} is larger than {limit} bytes")]
    TooLarge {
        /// The URL fetched.
        url: String,
        /// The cap in bytes.
        limit: usize,
    },
    /// The document holds more keys than the key-count cap.
    #[error("key directory {url} lists more than {limit} keys")]
    TooManyKeys {
        /// The URL fetched.
        url: String,
        /// The cap.
        limit: usize,
    },
    /// The document is not a JWKS (`{"keys": [...]}`).
    #[error("key directory {url} is malformed: {reason}")]
    Malformed {
        /// The URL fetched.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The directory (fetched at most once per `directory_min_ttl` for this) has no usable key
    /// with this thumbprint, or a refetch removed it (revocation).
    #[error("no key with keyid {keyid} in {url}")]
    UnknownKeyId {
        /// The signature's keyid.
        keyid: String,
        /// The directory (or "static keys").
        url: String,
    },
    /// The key's `nbf` is in the future (PRODUCT.md decision 6).
    #[error("key {keyid} is not valid before {nbf}")]
    KeyNotYetValid {
        /// The keyid.
        keyid: String,
        /// The key's `nbf`, Unix seconds.
        nbf: u64,
    },
    /// The key's `exp` has passed (PRODUCT.md decision 6).
    #[error("key {keyid} expired at {exp}")]
    KeyExpired {
        /// The keyid.
        keyid: String,
        /// The key's `exp`, Unix seconds.
        exp: u64,
    },
}

impl DirectoryError {
    /// The `result` label of the fetch metric for a failed fetch.
    pub fn fetch_result(&self) -> &'static str {
        match self {
            DirectoryError::Unreachable { .. } => "unreachable",
            DirectoryError::BadStatus { .. } => "bad_status",
            DirectoryError::BadMediaType { .. } => "bad_media_type",
            DirectoryError::TooLarge { .. } | DirectoryError::TooManyKeys { .. } => "too_large",
            DirectoryError::Malformed { .. } => "malformed",
            DirectoryError::NoAgent { .. }
            | DirectoryError::UntrustedOrigin { .. }
            | DirectoryError::UnsupportedAgentType(_)
            | DirectoryError::UnknownKeyId { .. }
            | DirectoryError::KeyNotYetValid { .. }
            | DirectoryError::KeyExpired { .. } => "other",
        }
    }
}

/// A key the signature may be verified with, and the agent identity it speaks for.
#[derive(Debug, Clone)]
pub struct ResolvedKey {
    key: VerifyingKey,
    agent: String,
}

impl ResolvedKey {
    /// The Ed25519 public key.
    pub fn key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The agent id: the directory's normalized origin, or a static key's `agent`.
    pub fn agent(&self) -> &str {
        &self.agent
    }
}

/// One directory's cached state.
#[derive(Default)]
struct Slot {
    state: RwLock<SlotState>,
    /// Held by the one request that fetches; the others wait, then read the new state.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default, Clone)]
struct SlotState {
    keys: Option<Arc<KeySet>>,
    fresh_until: Option<UnixTime>,
    last_attempt: Option<UnixTime>,
    last_error: Option<DirectoryError>,
}

enum Lookup {
    Found(DirectoryKey),
    Fetch,
    Fail(DirectoryError),
}

/// Most directories cached at once (each trusted origin, plus `jwks_uri` URLs under them).
const MAX_DIRECTORIES: u64 = 4096;

/// Resolves keys for signatures: static keys first, then allow-listed directories.
pub struct KeyResolver {
    statics: HashMap<String, ResolvedKey>,
    trusted: HashSet<String>,
    fetcher: Arc<dyn Fetch>,
    slots: moka::sync::Cache<String, Arc<Slot>>,
    min_ttl: Duration,
    max_ttl: Duration,
    fetches: Family<FetchLabels, Counter>,
}

impl std::fmt::Debug for KeyResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyResolver").field("static_keys", &self.statics.len()).field("trusted", &self.trusted).finish()
    }
}

impl KeyResolver {
    /// Validates the directory settings of `[signatures]` (trusted origins, static keys,
    /// `directory_ca` relative to `base_dir`, timeout and TTLs) and builds the resolver.
    /// Every bad field is reported.
    pub fn new(cfg: &RawSignatures, base_dir: &Path) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let trusted = trusted_origins(cfg, &mut errors);
        let statics = static_keys(cfg, &mut errors);
        let (timeout, min_ttl, max_ttl) = (cfg.directory_timeout.0, cfg.directory_min_ttl.0, cfg.directory_max_ttl.0);
        if timeout.is_zero() {
            errors.push(FieldError::new("signatures.directory_timeout", "must be greater than zero"));
        }
        if min_ttl.is_zero() {
            errors.push(FieldError::new("signatures.directory_min_ttl", "must be greater than zero"));
        }
        if max_ttl < min_ttl {
            errors.push(FieldError::new("signatures.directory_max_ttl", "must not be less than signatures.directory_min_ttl"));
        }
        let ca = cfg.directory_ca.as_ref().map(|p| base_dir.join(p));
        let fetcher = match HttpFetch::new(ca.as_deref(), timeout.max(Duration::from_millis(1))) {
            Ok(f) => Some(f),
            Err(e) => {
                errors.push(FieldError::new("signatures.directory_ca", e.to_string()));
                None
            }
        };
        match fetcher {
            Some(f) if errors.is_empty() => Ok(Self::with_fetcher(statics, trusted, Arc::new(f), min_ttl, max_ttl)),
            _ => Err(errors),
        }
    }

    fn with_fetcher(statics: HashMap<String, ResolvedKey>, trusted: HashSet<String>, fetcher: Arc<dyn Fetch>, min_ttl: Duration, max_ttl: Duration) -> Self {
        KeyResolver { statics, trusted, fetcher, slots: moka::sync::Cache::new(MAX_DIRECTORIES), min_ttl, max_ttl, fetches: Family::default() }
    }

    /// The directory fetch counter (label `result`), for the metrics registry.
    pub fn fetch_counter(&self) -> Family<FetchLabels, Counter> {
        self.fetches.clone()
    }

    /// The key for `keyid`, named by `agent` (the `Signature-Agent` member the signature
    /// covers), at time `now`.
    pub async fn resolve(&self, agent: Option<&AgentRef>, keyid: &str, now: UnixTime) -> Result<ResolvedKey, DirectoryError> {
        let Some(agent) = agent else {
            return self.statics.get(keyid).cloned().ok_or_else(|| DirectoryError::NoAgent { keyid: keyid.to_owned() });
        };
        let origin = agent.origin();
        // A static key speaks for its configured agent only: lookup stays on (agent, keyid).
        if let Some(k) = self.statics.get(keyid).filter(|k| k.agent == origin) {
            return Ok(k.clone());
        }
        if !self.trusted.contains(&origin) {
            return Err(DirectoryError::UntrustedOrigin { origin });
        }
        let url = match agent.kind() {
            AgentKind::Directory => format!("{origin}{WELL_KNOWN_PATH}"),
            AgentKind::JwksUri => without_fragment(agent.url()),
            AgentKind::Cimd => return Err(DirectoryError::UnsupportedAgentType(AgentKind::Cimd.as_str())),
        };
        let key = self.directory_key(&url, agent.kind(), keyid, now).await?;
        check_window(&key, keyid, now)?;
        Ok(ResolvedKey { key: key.key, agent: origin })
    }

    async fn directory_key(&self, url: &str, kind: AgentKind, keyid: &str, now: UnixTime) -> Result<DirectoryKey, DirectoryError> {
        let slot = self.slots.get_with_by_ref(url, || Arc::new(Slot::default()));
        if let Some(done) = self.lookup(&slot, url, keyid, now).into_result() {
            return done;
        }
        // Single flight: the first request fetches; the others wait here and then find the
        // fresh document (or the recorded failure) instead of fetching again.
        let _fetching = slot.fetching.lock().await;
        if let Some(done) = self.lookup(&slot, url, keyid, now).into_result() {
            return done;
        }
        let fetched = self.fetcher.fetch(url, kind).await;
        let result = match &fetched {
            Ok(_) => "ok",
            Err(e) => e.fetch_result(),
        };
        self.fetches.get_or_create(&FetchLabels { result }).inc();
        {
            let mut state = slot.state.write().unwrap_or_else(|p| p.into_inner());
            state.last_attempt = Some(now);
            match fetched {
                Ok(doc) => {
                    let ttl = doc.max_age.unwrap_or(self.min_ttl).clamp(self.min_ttl, self.max_ttl);
                    state.fresh_until = Some(UnixTime(now.0 + ttl));
                    state.keys = Some(Arc::new(doc.keys));
                    state.last_error = None;
                }
                // WBA "Discovery Failure": a failed fetch is not evidence; keep what we had.
                Err(e) => {
                    tracing::warn!(directory = %url, error = %e, "Key directory fetch failed");
                    state.last_error = Some(e);
                }
            }
        }
        match self.lookup(&slot, url, keyid, now) {
            Lookup::Found(k) => Ok(k),
            Lookup::Fail(e) => Err(e),
            Lookup::Fetch => Err(self.missing(&slot, url, keyid)),
        }
    }

    /// What the cached state says about `keyid` now.
    fn lookup(&self, slot: &Slot, url: &str, keyid: &str, now: UnixTime) -> Lookup {
        let state = slot.state.read().unwrap_or_else(|p| p.into_inner());
        let may_fetch = state.last_attempt.is_none_or(|t| now.0 >= t.0 + self.min_ttl);
        let is_fresh = state.fresh_until.is_some_and(|t| now < t);
        match state.keys.as_ref().and_then(|ks| ks.get(keyid)) {
            Some(k) if is_fresh || !may_fetch => Lookup::Found(k.clone()),
            _ if may_fetch => Lookup::Fetch,
            _ => {
                drop(state);
                Lookup::Fail(self.missing(slot, url, keyid))
            }
        }
    }

    /// The error for a key that is not in the cached state and may not be fetched again yet.
    fn missing(&self, slot: &Slot, url: &str, keyid: &str) -> DirectoryError {
        let state = slot.state.read().unwrap_or_else(|p| p.into_inner());
        match (&state.keys, &state.last_error) {
            // Never fetched successfully: the failure is the reason (enforce refuses).
            (None, Some(e)) => e.clone(),
            _ => DirectoryError::UnknownKeyId { keyid: keyid.to_owned(), url: url.to_owned() },
        }
    }
}

impl Lookup {
    /// `Some` when the lookup decided; `None` when a fetch is needed.
    fn into_result(self) -> Option<Result<DirectoryKey, DirectoryError>> {
        match self {
            Lookup::Found(k) => Some(Ok(k)),
            Lookup::Fail(e) => Some(Err(e)),
            Lookup::Fetch => None,
        }
    }
}

/// PRODUCT.md decision 6: a key outside its `nbf`/`exp` window is not used.
fn check_window(key: &DirectoryKey, keyid: &str, now: UnixTime) -> Result<(), DirectoryError> {
    if let Some(nbf) = key.nbf.filter(|nbf| now.secs() < *nbf) {
        return Err(DirectoryError::KeyNotYetValid { keyid: keyid.to_owned(), nbf });
    }
    if let Some(exp) = key.exp.filter(|exp| now.secs() >= *exp) {
        return Err(DirectoryError::KeyExpired { keyid: keyid.to_owned(), exp });
    }
    Ok(())
}

fn without_fragment(url: &Url) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    u.set_query(None);
    u.to_string()
}

/// `https` origin of `s`, normalized (RFC 3986 §6.2.2/§6.2.3: lowercase host, default port
/// dropped), or why it is not one.
pub fn normalize_origin(s: &str) -> Result<String, String> {
    let u = Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if u.scheme() != "https" {
        return Err(format!("{s:?} must be an https origin"));
    }
    if u.path() != "/" || u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() {
        return Err(format!("{s:?} must be an origin (scheme://host[:port]) without path, query or credentials"));
    }
    Ok(u.origin().ascii_serialization())
}

fn trusted_origins(cfg: &RawSignatures, errors: &mut Vec<FieldError>) -> HashSet<String> {
    let mut out = HashSet::new();
    for (i, a) in cfg.trusted_agents.iter().enumerate() {
        match normalize_origin(a) {
            Ok(o) => {
                out.insert(o);
            }
            Err(reason) => errors.push(FieldError::new(format!("signatures.trusted_agents[{i}]"), reason)),
        }
    }
    out
}

fn static_keys(cfg: &RawSignatures, errors: &mut Vec<FieldError>) -> HashMap<String, ResolvedKey> {
    let mut out = HashMap::new();
    for (i, k) in cfg.keys.iter().enumerate() {
        let agent = normalize_origin(&k.agent).map_err(|reason| errors.push(FieldError::new(format!("signatures.keys[{i}].agent"), reason)));
        let key = verifying_key_from_jwk(&k.jwk).map_err(|e| errors.push(FieldError::new(format!("signatures.keys[{i}].jwk"), e.to_string())));
        if let (Ok(agent), Ok(key)) = (agent, key) {
            let keyid = ed25519_thumbprint(&key);
            if out.insert(keyid.clone(), ResolvedKey { key, agent }).is_some() {
                errors.push(FieldError::new(format!("signatures.keys[{i}].jwk"), format!("key {keyid} is listed twice")));
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
