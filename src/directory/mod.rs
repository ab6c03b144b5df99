//! Key resolution (pipeline stage 4): `Signature-Agent` → key directory → the Ed25519 key
//! whose RFC 7638 thumbprint equals the signature's `keyid`, or a static key from config.
//!
//! Decides which key, if any, may verify a signature, and which identity that key speaks for;
//! it does not verify anything itself. Trusts: the operator's `signatures.keys` and
//! `signatures.trusted_agents`, and directory documents fetched over HTTPS from an allow-listed
//! origin (Web Bot Auth "Key Distribution and Discovery"). It never trusts a directory's
//! `kid`: the thumbprint is computed here. Lookup is on the pair (key source, keyid), never
//! keyid alone.
//!
//! Identity: only an origin's well-known directory
//! (`/.well-known/http-message-signatures-directory`) speaks for the origin. A `type=jwks_uri`
//! key set may sit at any path of a trusted origin (an upload area, too), so it is refused
//! unless `signatures.accept_jwks_uri` is on, and then its keys speak for its full URL (query
//! and fragment dropped), never for the bare origin.
//!
//! Caching (docs/design.md decision 7; WBA "Cache Behaviour", "Discovery Failure"): a document is
//! fresh for its `Cache-Control: max-age`, clamped to `directory_min_ttl`..`directory_max_ttl`
//! (60 s when it sends none), so a key removed from the directory stops verifying within
//! max-age. A keyid the fresh document lacks causes at most one refetch per
//! `directory_refetch_interval` per origin (and none right after any fetch of that origin). A
//! refetched document that lacks a key revokes it; a failed fetch is not evidence and evicts
//! nothing; a failure is remembered (no new attempt) for `directory_refetch_interval`, at most
//! 5 minutes. A document is fetched by at most one request at a time (single flight).
//!
//! Budgets: keys are resolved before anything is verified, so every fetch is one an
//! unauthenticated request asked for. Besides the per-URL rules above, fetches are bounded per
//! origin (`directory_fetch_budget`) and in total (`directory_fetch_budget_global`) per
//! minute, whatever URLs or keyids requests name; an exhausted budget refuses the request.
//! Time is passed in by the caller.

mod budget;
mod fetch;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use url::Url;

use crate::config::{Directory, FieldError};
use crate::signature::{shown_keyid, AgentKind, AgentRef};
use crate::telemetry::{BudgetLabels, DirectoryMetrics, FetchLabels};
use portcullis_wire::UnixTime;

pub(crate) use budget::FetchBudget;
#[cfg(test)]
pub(crate) use fetch::{parse_key_set, ParseError, MAX_DIRECTORY_KEYS};
pub(crate) use fetch::{DirectoryKey, KeySet, WELL_KNOWN_PATH};
use fetch::{Fetch, HttpFetch};

/// Why no key could be resolved for a signature. Every variant refuses the request (401).
/// Texts name what failed in the gateway's words: a keyid is quoted only when it has the shape
/// of a thumbprint ([`shown_keyid`]), and a client-chosen path never (a `jwks_uri` key set is
/// named by its origin).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    /// The signature names no `Signature-Agent` and its keyid is not a static key.
    #[error("signature names no Signature-Agent and keyid {} is not a configured static key", shown_keyid(.keyid))]
    NoAgent {
        /// The signature's keyid.
        keyid: String,
    },
    /// The agent's origin is not in `signatures.trusted_agents`: its directory is never fetched.
    /// (The decision log's `claimed_agent` names the origin; the refusal does not repeat it.)
    #[error("the Signature-Agent origin is not in signatures.trusted_agents")]
    UntrustedOrigin,
    /// The `Signature-Agent` type is one this gateway does not resolve (`cimd`).
    #[error("Signature-Agent type {0} is not supported")]
    UnsupportedAgentType(&'static str),
    /// A `type=jwks_uri` agent while `signatures.accept_jwks_uri` is off: only an origin's
    /// well-known directory may speak for it.
    #[error("Signature-Agent type jwks_uri is not accepted (signatures.accept_jwks_uri is off); name the origin and publish keys at {WELL_KNOWN_PATH}")]
    JwksUriRefused,
    /// Fetching would exceed a fetch budget (`signatures.directory_fetch_budget` per origin, or
    /// `signatures.directory_fetch_budget_global`): nothing was fetched.
    #[error("key directory fetch budget exhausted ({0}); try again later")]
    FetchBudgetExhausted(&'static str),
    /// The directory could not be fetched (DNS, connect, TLS, timeout, broken body).
    #[error("key directory {url} unreachable: {reason}")]
    Unreachable {
        /// The key source (see [`DirectoryError`]).
        url: String,
        /// What failed.
        reason: String,
    },
    /// The directory answered with a status other than 200 (redirects included: WBA forbids
    /// following them).
    #[error("key directory {url} answered {status}, not 200")]
    BadStatus {
        /// The key source.
        url: String,
        /// The status received.
        status: u16,
    },
    /// The directory's `Content-Type` is not the directory (or JWKS) media type.
    #[error("key directory {url} has media type {content_type:?}")]
    BadMediaType {
        /// The key source.
        url: String,
        /// The `Content-Type` received (empty when absent), at most 64 characters.
        content_type: String,
    },
    /// The document is larger than the size cap.
    #[error("key directory {url} is larger than {limit} bytes")]
    TooLarge {
        /// The key source.
        url: String,
        /// The cap in bytes.
        limit: usize,
    },
    /// The document holds more keys than the key-count cap.
    #[error("key directory {url} lists more than {limit} keys")]
    TooManyKeys {
        /// The key source.
        url: String,
        /// The cap.
        limit: usize,
    },
    /// The document is not a JWKS (`{"keys": [...]}`).
    #[error("key directory {url} is malformed: {reason}")]
    Malformed {
        /// The key source.
        url: String,
        /// What is wrong (a position, never the document's text).
        reason: String,
    },
    /// The directory has no usable key with this thumbprint (after the refetch an unknown keyid
    /// may cause), or a refetch removed it (revocation).
    #[error("no key with keyid {} in {url}", shown_keyid(.keyid))]
    UnknownKeyId {
        /// The signature's keyid.
        keyid: String,
        /// The key source.
        url: String,
    },
    /// The key's `nbf` is in the future (docs/design.md decision 6).
    #[error("key {} is not valid before {nbf}", shown_keyid(.keyid))]
    KeyNotYetValid {
        /// The keyid.
        keyid: String,
        /// The key's `nbf`, Unix seconds.
        nbf: u64,
    },
    /// The key's `exp` has passed (docs/design.md decision 6).
    #[error("key {} expired at {exp}", shown_keyid(.keyid))]
    KeyExpired {
        /// The keyid.
        keyid: String,
        /// The key's `exp`, Unix seconds.
        exp: u64,
    },
}

impl DirectoryError {
    /// The `result` label of the fetch metric for a failed fetch.
    pub(crate) fn fetch_result(&self) -> &'static str {
        match self {
            DirectoryError::Unreachable { .. } => "unreachable",
            DirectoryError::BadStatus { .. } => "bad_status",
            DirectoryError::BadMediaType { .. } => "bad_media_type",
            DirectoryError::TooLarge { .. } | DirectoryError::TooManyKeys { .. } => "too_large",
            DirectoryError::Malformed { .. } => "malformed",
            DirectoryError::NoAgent { .. }
            | DirectoryError::UntrustedOrigin
            | DirectoryError::UnsupportedAgentType(_)
            | DirectoryError::JwksUriRefused
            | DirectoryError::FetchBudgetExhausted(_)
            | DirectoryError::UnknownKeyId { .. }
            | DirectoryError::KeyNotYetValid { .. }
            | DirectoryError::KeyExpired { .. } => "other",
        }
    }
}

/// A key the signature may be verified with, and the agent identity it speaks for.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedKey {
    key: VerifyingKey,
    agent: String,
}

impl ResolvedKey {
    /// The Ed25519 public key.
    pub(crate) fn key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The agent id: the directory's normalized origin, a `jwks_uri` key set's full URL, or a
    /// static key's `agent`.
    pub(crate) fn agent(&self) -> &str {
        &self.agent
    }
}

/// One key source's cached state.
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
    /// After a failed fetch: no new attempt before this time.
    retry_at: Option<UnixTime>,
    last_error: Option<DirectoryError>,
}

/// Why a fetch is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Never fetched (or only failed, and the failure is forgotten).
    Cold,
    /// The cached document is past its max-age.
    Refresh,
    /// The fresh document lacks the keyid: a key may have been added.
    UnknownKeyId,
}

enum Lookup {
    Found(DirectoryKey),
    Fetch(Need),
    Fail(DirectoryError),
}

/// Per trusted origin: its fetch budget and when it was last fetched (for unknown keyids).
struct OriginState {
    budget: FetchBudget,
    last_fetch: Mutex<Option<UnixTime>>,
}

/// Most key sources cached at once (each trusted origin, plus `jwks_uri` URLs under them).
const MAX_DIRECTORIES: u64 = 4096;
/// How long a document that sends no `max-age` is fresh (clamped to min/max TTL).
const DEFAULT_TTL: Duration = Duration::from_secs(60);
/// Longest time a failed fetch is remembered (docs/design.md decision 7).
const MAX_FAILURE_MEMORY: Duration = Duration::from_secs(300);

/// The cache and budget settings of `[signatures]`.
#[derive(Debug, Clone, Copy)]
struct Settings {
    min_ttl: Duration,
    max_ttl: Duration,
    refetch_interval: Duration,
    accepts_jwks_uri: bool,
    origin_budget: u32,
    global_budget: u32,
}

/// Resolves keys for signatures: static keys first, then allow-listed directories.
pub(crate) struct KeyResolver {
    statics: HashMap<String, ResolvedKey>,
    trusted: HashMap<String, OriginState>,
    global_budget: FetchBudget,
    fetcher: Arc<dyn Fetch>,
    slots: moka::sync::Cache<String, Arc<Slot>>,
    settings: Settings,
    metrics: DirectoryMetrics,
}

impl std::fmt::Debug for KeyResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let trusted: Vec<&String> = self.trusted.keys().collect();
        f.debug_struct("KeyResolver").field("static_keys", &self.statics.len()).field("trusted", &trusted).field("settings", &self.settings).finish()
    }
}

impl KeyResolver {
    /// Builds the resolver from the validated `[signatures]` key settings. Fails only when
    /// the HTTPS client cannot be built (`signatures.directory_ca` unreadable or not PEM).
    pub(crate) fn new(cfg: &Directory) -> Result<Self, FieldError> {
        let fetcher = HttpFetch::new(cfg.ca.as_deref(), cfg.timeout).map_err(|e| FieldError::new("signatures.directory_ca", e.to_string()))?;
        Ok(Self::with_fetcher(static_keys(cfg), cfg.trusted_agents.iter().cloned().collect(), Arc::new(fetcher), Settings::from(cfg)))
    }

    fn with_fetcher(statics: HashMap<String, ResolvedKey>, trusted: HashSet<String>, fetcher: Arc<dyn Fetch>, settings: Settings) -> Self {
        let trusted = trusted
            .into_iter()
            .map(|origin| (origin, OriginState { budget: FetchBudget::per_minute(settings.origin_budget), last_fetch: Mutex::new(None) }))
            .collect();
        KeyResolver {
            statics,
            trusted,
            global_budget: FetchBudget::per_minute(settings.global_budget),
            fetcher,
            slots: moka::sync::Cache::new(MAX_DIRECTORIES),
            settings,
            metrics: DirectoryMetrics::default(),
        }
    }

    /// The resolver's counters (fetches by result, refusals by exhausted budget), for the
    /// metrics registry.
    pub(crate) fn metrics(&self) -> DirectoryMetrics {
        self.metrics.clone()
    }

    /// The key for `keyid`, named by `agent` (the `Signature-Agent` member the signature
    /// covers), at time `now`.
    pub(crate) async fn resolve(&self, agent: Option<&AgentRef>, keyid: &str, now: UnixTime) -> Result<ResolvedKey, DirectoryError> {
        let Some(agent) = agent else {
            return self.statics.get(keyid).cloned().ok_or_else(|| DirectoryError::NoAgent { keyid: keyid.to_owned() });
        };
        let origin = agent.origin();
        let (url, identity) = match agent.kind() {
            AgentKind::Directory => (format!("{origin}{WELL_KNOWN_PATH}"), origin.clone()),
            AgentKind::JwksUri if self.settings.accepts_jwks_uri => {
                let url = without_query(agent.url());
                (url.clone(), url)
            }
            AgentKind::JwksUri => return Err(DirectoryError::JwksUriRefused),
            AgentKind::Cimd => return Err(DirectoryError::UnsupportedAgentType(AgentKind::Cimd.as_str())),
        };
        // A static key speaks for its configured agent (an origin) only: lookup stays on
        // (agent id, keyid), so a jwks_uri agent never matches one.
        if let Some(k) = self.statics.get(keyid).filter(|k| k.agent == identity) {
            return Ok(k.clone());
        }
        let Some(origin_state) = self.trusted.get(&origin) else {
            return Err(DirectoryError::UntrustedOrigin);
        };
        let key = self.directory_key(origin_state, &url, agent.kind(), keyid, now).await?;
        check_window(&key, keyid, now)?;
        Ok(ResolvedKey { key: key.key, agent: identity })
    }

    async fn directory_key(&self, origin: &OriginState, url: &str, kind: AgentKind, keyid: &str, now: UnixTime) -> Result<DirectoryKey, DirectoryError> {
        // Keyed by kind too: a jwks_uri fetch (laxer media types) never fills the directory's slot.
        let slot = self.slots.get_with(format!("{} {url}", kind.as_str()), || Arc::new(Slot::default()));
        let source = fetch::source_name(url, kind);
        if let Some(done) = self.lookup(&slot, &source, keyid, now).decided() {
            return done;
        }
        // Single flight: the first request fetches; the others wait here and then find the
        // fresh document (or the recorded failure) instead of fetching again.
        let _fetching = slot.fetching.lock().await;
        let need = match self.lookup(&slot, &source, keyid, now) {
            Lookup::Found(k) => return Ok(k),
            Lookup::Fail(e) => return Err(e),
            Lookup::Fetch(need) => need,
        };
        self.admit(origin, need, now).map_err(|e| match e {
            Admission::Budget(b) => DirectoryError::FetchBudgetExhausted(b),
            Admission::TooSoon => DirectoryError::UnknownKeyId { keyid: keyid.to_owned(), url: source.clone() },
        })?;
        let fetched = self.fetcher.fetch(url, kind).await;
        let result = match &fetched {
            Ok(_) => "ok",
            Err(e) => e.fetch_result(),
        };
        self.metrics.fetches.get_or_create(&FetchLabels { result }).inc();
        self.record(&slot, fetched, &source, now);
        match self.lookup(&slot, &source, keyid, now) {
            Lookup::Found(k) => Ok(k),
            Lookup::Fail(e) => Err(e),
            // Just fetched: a keyid still missing is unknown, not a reason to fetch again.
            Lookup::Fetch(_) => Err(self.missing(&slot, &source, keyid)),
        }
    }

    /// Whether a fetch for `need` may go out now: an unknown keyid only when the origin was not
    /// fetched within `directory_refetch_interval`; every fetch within both budgets.
    fn admit(&self, origin: &OriginState, need: Need, now: UnixTime) -> Result<(), Admission> {
        let mut last = origin.last_fetch.lock().unwrap_or_else(|p| p.into_inner());
        // An earlier `now` than the last fetch (requests race) counts as within the interval.
        if need == Need::UnknownKeyId && last.is_some_and(|t| now.0 < t.0 + self.settings.refetch_interval) {
            return Err(Admission::TooSoon);
        }
        let taken = budget::take_both((&origin.budget, ORIGIN_BUDGET), (&self.global_budget, GLOBAL_BUDGET), now);
        if let Err(which) = taken {
            let label = if which == ORIGIN_BUDGET { "origin" } else { "global" };
            self.metrics.budget_exhausted.get_or_create(&BudgetLabels { budget: label }).inc();
            static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
            if let Some(held) = THROTTLE.admit() {
                tracing::warn!(
                    budget = label,
                    similar_held_back = held,
                    "Key directory fetch refused: fetch budget exhausted (each one is counted in portcullis_directory_fetch_budget_exhausted_total)"
                );
            }
            return Err(Admission::Budget(which));
        }
        *last = Some(last.map_or(now, |t| t.max(now)));
        Ok(())
    }

    /// Stores a fetch's outcome in the slot.
    fn record(&self, slot: &Slot, fetched: Result<fetch::Fetched, DirectoryError>, source: &str, now: UnixTime) {
        let mut state = slot.state.write().unwrap_or_else(|p| p.into_inner());
        match fetched {
            Ok(doc) => {
                let ttl = doc.max_age.unwrap_or(DEFAULT_TTL).clamp(self.settings.min_ttl, self.settings.max_ttl);
                state.fresh_until = Some(UnixTime(now.0 + ttl));
                state.keys = Some(Arc::new(doc.keys));
                state.retry_at = None;
                state.last_error = None;
            }
            // WBA "Discovery Failure": a failed fetch is not evidence; keep what we had, and do
            // not try again before the failure is forgotten.
            Err(e) => {
                tracing::warn!(directory = %source, error = %e, "Key directory fetch failed");
                state.retry_at = Some(UnixTime(now.0 + self.settings.refetch_interval.min(MAX_FAILURE_MEMORY)));
                state.last_error = Some(e);
            }
        }
    }

    /// What the cached state says about `keyid` now.
    fn lookup(&self, slot: &Slot, source: &str, keyid: &str, now: UnixTime) -> Lookup {
        let state = slot.state.read().unwrap_or_else(|p| p.into_inner());
        let is_fresh = state.fresh_until.is_some_and(|t| now < t);
        let is_backing_off = state.retry_at.is_some_and(|t| now < t);
        match (&state.keys, state.keys.as_ref().and_then(|ks| ks.get(keyid))) {
            // A failed refresh keeps the keys (decision 7) until the next attempt may go out.
            (_, Some(k)) if is_fresh || is_backing_off => Lookup::Found(k.clone()),
            (_, Some(_)) => Lookup::Fetch(Need::Refresh),
            (None, None) if is_backing_off => Lookup::Fail(self.missing_locked(&state, source, keyid)),
            (None, None) => Lookup::Fetch(Need::Cold),
            (Some(_), None) if is_backing_off => Lookup::Fail(self.missing_locked(&state, source, keyid)),
            (Some(_), None) if is_fresh => Lookup::Fetch(Need::UnknownKeyId),
            (Some(_), None) => Lookup::Fetch(Need::Refresh),
        }
    }

    /// The error for a key that is not in the cached state and may not be fetched now.
    fn missing(&self, slot: &Slot, source: &str, keyid: &str) -> DirectoryError {
        let state = slot.state.read().unwrap_or_else(|p| p.into_inner());
        self.missing_locked(&state, source, keyid)
    }

    fn missing_locked(&self, state: &SlotState, source: &str, keyid: &str) -> DirectoryError {
        match (&state.keys, &state.last_error) {
            // Never fetched successfully: the failure is the reason (enforce refuses).
            (None, Some(e)) => e.clone(),
            _ => DirectoryError::UnknownKeyId { keyid: keyid.to_owned(), url: source.to_owned() },
        }
    }
}

/// Why [`KeyResolver::admit`] let no fetch go out.
enum Admission {
    /// The keyid is unknown and the origin was fetched within the refetch interval.
    TooSoon,
    /// This budget is exhausted (its config key).
    Budget(&'static str),
}

/// The config keys the budget refusals name.
const ORIGIN_BUDGET: &str = "signatures.directory_fetch_budget, per origin";
const GLOBAL_BUDGET: &str = "signatures.directory_fetch_budget_global";

impl Lookup {
    /// `Some` when the lookup decided; `None` when a fetch is needed.
    fn decided(self) -> Option<Result<DirectoryKey, DirectoryError>> {
        match self {
            Lookup::Found(k) => Some(Ok(k)),
            Lookup::Fail(e) => Some(Err(e)),
            Lookup::Fetch(_) => None,
        }
    }
}

/// docs/design.md decision 6: a key outside its `nbf`/`exp` window is not used.
fn check_window(key: &DirectoryKey, keyid: &str, now: UnixTime) -> Result<(), DirectoryError> {
    if let Some(nbf) = key.nbf.filter(|nbf| now.secs() < *nbf) {
        return Err(DirectoryError::KeyNotYetValid { keyid: keyid.to_owned(), nbf });
    }
    if let Some(exp) = key.exp.filter(|exp| now.secs() >= *exp) {
        return Err(DirectoryError::KeyExpired { keyid: keyid.to_owned(), exp });
    }
    Ok(())
}

/// A `jwks_uri` key set's URL as fetched and as its agent id: query and fragment dropped (they
/// would only let one key set be named, and fetched, under endless names).
fn without_query(url: &Url) -> String {
    let mut u = url.clone();
    u.set_fragment(None);
    u.set_query(None);
    u.to_string()
}

impl From<&Directory> for Settings {
    fn from(cfg: &Directory) -> Settings {
        Settings {
            min_ttl: cfg.min_ttl,
            max_ttl: cfg.max_ttl,
            refetch_interval: cfg.refetch_interval,
            accepts_jwks_uri: cfg.accept_jwks_uri,
            origin_budget: cfg.fetch_budget,
            global_budget: cfg.fetch_budget_global,
        }
    }
}

fn static_keys(cfg: &Directory) -> HashMap<String, ResolvedKey> {
    cfg.keys.iter().map(|k| (k.keyid.clone(), ResolvedKey { key: k.key, agent: k.agent.clone() })).collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
