//! Exactly-once calls: the idempotency journal (docs/design.md "Exactly-once tool calls").
//!
//! Runs after the policy decision (which says whether a call needs an `Idempotency-Key`) and
//! before quotas, so a replayed answer spends nothing. The journal entry is keyed by the
//! caller's identity (token `sub`, else the verified agent id) and the key, and remembers the
//! call digest of the call that made it:
//!
//! | situation | result |
//! |---|---|
//! | key required, none sent (or malformed) | 400 `idempotency_key_required` |
//! | first use | [`Claim::First`]: reserved; forwarded; the complete answer recorded |
//! | same key, same call, answer recorded | [`Claim::Replay`]: the recorded answer, own JSON-RPC id |
//! | same key while the first call is in flight | 409 `idempotency_in_flight` |
//! | same key, another call | 422 `idempotency_key_reused` |
//! | a new key while the caller holds `max_entries_per_caller` live entries | 429 `caller_limit_exceeded` |
//!
//! Only 2xx answers that carry the final JSON-RPC response are recorded; anything else
//! (backend unreachable, a 5xx, a stream cut before the answer, an interim `input_required`
//! answer, an answer over `idempotency.max_response`) releases the reservation, so a retry is
//! forwarded. Recording tees the response: every frame goes to the client as it arrives.
//! A store that cannot answer refuses the call (503): never a second execution.

pub mod key;
mod record;
mod replay;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::Value;
use sha2::{Digest, Sha256};

use portcullis_wire::mcp::McpRequest;

use crate::call_digest::{CallDigest, CallDigestError};
use crate::config;
use crate::inbound::Inbound;
use crate::policy::verdict::KeyUse;
use crate::state::caller::{CallerBound, CallerKey};
use crate::state::journal::{Entry, JournalStore, RecordedAnswer, Reserve, Ticket};
use crate::state::{StoreError, Stores};
pub(crate) use key::KeyForm;

/// The response body type (the same as `decision::ResponseBody`; named here so the journal
/// sits below the decision and evidence modules that carry it).
pub(crate) type ResponseBody = http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>;

/// Who is calling, for scoping keys: the verified token's `sub` and the verified agent id;
/// and whom its entries count against (`idempotency.max_entries_per_caller`).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// The verified token's subject.
    pub sub: Option<&'a str>,
    /// The verified agent id.
    pub agent: Option<&'a str>,
    /// The caller's per-caller bucket (decision 13).
    pub key: CallerKey,
}

/// Why the idempotency stage refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyError {
    /// The decision requires a key and the request sent none.
    #[error("this call requires an Idempotency-Key header (a quoted string of 1-255 characters)")]
    KeyRequired,
    /// The header is not a usable key (see [`key`]).
    #[error("{0}")]
    MalformedKey(#[from] key::KeyError),
    /// Neither a verified user nor a verified agent to scope the key to.
    #[error("an Idempotency-Key needs a verified user (token) or agent (signature) to belong to")]
    NoIdentity,
    /// The body is a batch: a key names one call.
    #[error("an Idempotency-Key names one call; this request is a batch")]
    Batch,
    /// The call cannot be digested (not I-JSON, a number beyond ±(2^53−1)). Answered with a
    /// JSON-RPC `-32602` (Invalid params) error object.
    #[error("{error}")]
    InvalidCall {
        /// The request's JSON-RPC id.
        id: Option<Value>,
        /// Why it has no digest.
        error: CallDigestError,
    },
    /// A call with this key is still being answered.
    #[error("a call with this Idempotency-Key is still in flight; retry once it is answered")]
    InFlight,
    /// The key was used for a different call (another tool, other arguments).
    #[error("this Idempotency-Key was already used for a different call")]
    Reused,
    /// The decision requires a key but `idempotency.enabled = false`.
    #[error("the policy requires an idempotency key but the journal is off (idempotency.enabled = false)")]
    Disabled,
    /// The caller holds `idempotency.max_entries_per_caller` live entries (decision 13).
    #[error("this caller holds as many idempotency entries as it may (idempotency.max_entries_per_caller)")]
    CallerLimit {
        /// When the caller's first entry expires.
        retry_after: Duration,
    },
    /// The journal store could not answer.
    #[error("idempotency journal: {0}")]
    Store(#[from] StoreError),
}

impl IdempotencyError {
    /// The `error` code clients, logs and metrics see.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            IdempotencyError::KeyRequired | IdempotencyError::MalformedKey(_) | IdempotencyError::NoIdentity | IdempotencyError::Batch => {
                "idempotency_key_required"
            }
            IdempotencyError::InvalidCall { .. } => "invalid_params",
            IdempotencyError::InFlight => "idempotency_in_flight",
            IdempotencyError::Reused => "idempotency_key_reused",
            IdempotencyError::Disabled => "agent_access_denied",
            IdempotencyError::CallerLimit { .. } => "caller_limit_exceeded",
            IdempotencyError::Store(_) => "state_unavailable",
        }
    }

    /// The HTTP status of the refusal.
    pub(crate) fn status(&self) -> http::StatusCode {
        use http::StatusCode;
        match self {
            IdempotencyError::KeyRequired
            | IdempotencyError::MalformedKey(_)
            | IdempotencyError::NoIdentity
            | IdempotencyError::Batch
            | IdempotencyError::InvalidCall { .. } => StatusCode::BAD_REQUEST,
            IdempotencyError::InFlight => StatusCode::CONFLICT,
            IdempotencyError::Reused => StatusCode::UNPROCESSABLE_ENTITY,
            IdempotencyError::Disabled => StatusCode::FORBIDDEN,
            IdempotencyError::CallerLimit { .. } => StatusCode::TOO_MANY_REQUESTS,
            IdempotencyError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// What the stage decided for a call that uses the journal; carried in the request's evidence.
#[derive(Debug)]
pub enum Claim {
    /// This call reserved the key: forward it and record its answer.
    First(Reservation),
    /// The key holds the complete answer to this same call: send it again.
    Replay(Replay),
}

impl Claim {
    /// Whether the answer comes from the journal.
    pub(crate) fn is_replay(&self) -> bool {
        matches!(self, Claim::Replay(_))
    }
}

/// A recorded answer and what this request needs to receive it as its own.
#[derive(Debug)]
pub struct Replay {
    answer: Arc<RecordedAnswer>,
    /// This request's JSON-RPC id.
    id: Option<Value>,
    /// This request's `progressToken`.
    progress_token: Option<Value>,
}

/// A held reservation. Dropped without being recorded (the call was refused later, or its
/// forward failed), it releases the key in the background so a retry is forwarded.
pub struct Reservation {
    ticket: Option<Ticket>,
    journal: Arc<Journal>,
    /// This request's JSON-RPC id and progress token, as JSON text.
    id: Option<String>,
    progress_token: Option<String>,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation").field("is_held", &self.ticket.is_some()).finish_non_exhaustive()
    }
}

impl Reservation {
    /// Records `answer`. Awaited before the client gets the answer's last bytes, so a retry
    /// sent after the first caller has the whole answer is always answered from the journal.
    async fn complete(mut self, answer: RecordedAnswer) {
        let Some(ticket) = self.ticket.take() else { return };
        let journal = &self.journal;
        match journal.store.complete(&ticket, &answer, journal.ttl).await {
            Ok(true) => journal.metrics.count("recorded"),
            Ok(false) => {
                tracing::warn!("Idempotency reservation expired before the answer (idempotency.in_flight_ttl); answer not recorded");
                journal.metrics.count("not_recorded");
            }
            Err(e) => {
                tracing::warn!(error = %e, "Idempotency answer not recorded; releasing the key so a retry is forwarded");
                journal.metrics.count("not_recorded");
                let _ = journal.store.release(&ticket).await;
            }
        }
    }

    /// Gives the key back: no answer will be recorded, a retry is forwarded. `why` is a
    /// metric label.
    async fn release(mut self, why: &'static str) {
        let Some(ticket) = self.ticket.take() else { return };
        self.journal.metrics.count(why);
        if let Err(e) = self.journal.store.release(&ticket).await {
            // The reservation frees itself after idempotency.in_flight_ttl.
            tracing::warn!(error = %e, "Idempotency reservation not released; it expires after idempotency.in_flight_ttl");
        }
    }
}

impl Drop for Reservation {
    /// A reservation dropped unsettled (the call was refused at a later stage, or the request
    /// was abandoned) is released in the background.
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else { return };
        let journal = self.journal.clone();
        journal.metrics.count("released");
        // The task holds no `Reservation`, so dropping it unpolled (runtime shutting down)
        // cannot come back here; the entry then lapses after idempotency.in_flight_ttl.
        spawn(async move {
            if let Err(e) = journal.store.release(&ticket).await {
                tracing::warn!(error = %e, "Idempotency reservation not released; it expires after idempotency.in_flight_ttl");
            }
        });
    }
}

fn spawn(f: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(f);
    }
}

/// Metric labels of `portcullis_idempotency_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `first`, `replayed`, `in_flight`, `reused`, `key_required`, `caller_limit`, `legacy_key`, `recorded`,
    /// `released`, `too_large`, `not_recorded`.
    pub result: &'static str,
}

/// The journal's counters.
#[derive(Clone, Debug, Default)]
pub struct IdempotencyMetrics {
    /// By result.
    pub results: Family<ResultLabels, Counter>,
}

impl IdempotencyMetrics {
    fn count(&self, result: &'static str) {
        self.results.get_or_create(&ResultLabels { result }).inc();
    }
}

/// What the stage and its recorders share.
struct Journal {
    store: Arc<dyn JournalStore>,
    ttl: Duration,
    in_flight_ttl: Duration,
    max_response: usize,
    /// `idempotency.max_entries_per_caller`.
    max_per_caller: usize,
    metrics: IdempotencyMetrics,
}

/// The idempotency stage, built from `[idempotency]` over the store `state.store` chose.
pub struct Idempotency {
    journal: Option<Arc<Journal>>,
    metrics: IdempotencyMetrics,
}

impl std::fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idempotency").field("is_enabled", &self.journal.is_some()).finish_non_exhaustive()
    }
}

impl Idempotency {
    /// The stage over the journal `state.store` chose ([`Stores::journal`]).
    pub(crate) fn new(cfg: &config::Idempotency, stores: &Stores) -> Idempotency {
        let metrics = IdempotencyMetrics::default();
        let journal = cfg.enabled.then(|| {
            Arc::new(Journal {
                store: stores.journal.clone(),
                ttl: cfg.ttl,
                in_flight_ttl: cfg.in_flight_ttl,
                max_response: usize::try_from(cfg.max_response).unwrap_or(usize::MAX),
                max_per_caller: cfg.max_entries_per_caller,
                metrics: metrics.clone(),
            })
        });
        Idempotency { journal, metrics }
    }

    /// The counters, to register with the metrics.
    pub(crate) fn metrics(&self) -> &IdempotencyMetrics {
        &self.metrics
    }

    /// Consults the journal for a call whose decision names idempotency (`key_use`).
    /// `Ok(None)`: the key is optional and none was sent (or the journal is off), so the call
    /// goes on without the journal.
    /// `mcp` is the parsed request (stage 8).
    pub(crate) async fn claim(
        &self,
        req: &Inbound,
        server: &str,
        caller: Caller<'_>,
        mcp: Option<&McpRequest>,
        key_use: KeyUse,
    ) -> Result<Option<Claim>, IdempotencyError> {
        let result = self.claim_inner(req, server, caller, mcp, key_use).await;
        match &result {
            Ok(Some(Claim::First(_))) => self.metrics.count("first"),
            Ok(Some(Claim::Replay(_))) => self.metrics.count("replayed"),
            Ok(None) => {}
            Err(e) => self.metrics.count(match e {
                IdempotencyError::InFlight => "in_flight",
                IdempotencyError::Reused => "reused",
                IdempotencyError::Store(_) => "store_error",
                IdempotencyError::CallerLimit { .. } => "caller_limit",
                _ => "key_required",
            }),
        }
        result
    }

    async fn claim_inner(
        &self,
        req: &Inbound,
        server: &str,
        caller: Caller<'_>,
        mcp: Option<&McpRequest>,
        key_use: KeyUse,
    ) -> Result<Option<Claim>, IdempotencyError> {
        let key = key::parse(&req.head.headers)?;
        let Some(journal) = &self.journal else {
            return match key_use {
                KeyUse::Required => Err(IdempotencyError::Disabled),
                KeyUse::Optional => Ok(None),
            };
        };
        let Some((key, form)) = key else {
            return match key_use {
                KeyUse::Required => Err(IdempotencyError::KeyRequired),
                KeyUse::Optional => Ok(None),
            };
        };
        if form == KeyForm::Bare {
            tracing::debug!("Idempotency-Key sent bare (not an RFC 8941 string); accepted as a legacy key");
            self.metrics.count("legacy_key");
        }
        let scope = identity(caller).ok_or(IdempotencyError::NoIdentity)?;
        // Section F: scoped by (server, caller, key); the single server's keys are as they were.
        let scope = if server == crate::config::DEFAULT_SERVER { scope } else { format!("{server}\u{0}{scope}") };
        if mcp.is_some_and(|m| m.is_batch) {
            return Err(IdempotencyError::Batch);
        }
        let call = CallDigest::of_body(&req.body).map_err(|e| match e {
            CallDigestError::NotACall => IdempotencyError::Batch,
            error => IdempotencyError::InvalidCall { id: mcp.and_then(|m| m.messages.first()).and_then(|m| m.id.clone()), error },
        })?;
        let ticket = Ticket {
            key: journal_key(&scope, &key),
            fingerprint: *call.digest.as_bytes(),
            token: uuid::Uuid::new_v4().simple().to_string(),
            bound: CallerBound::new(caller.key, journal.max_per_caller),
        };
        match journal.store.reserve(&ticket, journal.in_flight_ttl).await? {
            Reserve::Reserved => Ok(Some(Claim::First(Reservation {
                ticket: Some(ticket),
                journal: journal.clone(),
                id: call.id.as_ref().map(Value::to_string),
                progress_token: call.progress_token.as_ref().map(Value::to_string),
            }))),
            Reserve::Taken(entry) if entry.fingerprint() != &ticket.fingerprint => Err(IdempotencyError::Reused),
            Reserve::Taken(Entry::InFlight { .. }) => Err(IdempotencyError::InFlight),
            Reserve::Taken(Entry::Recorded { answer, .. }) => Ok(Some(Claim::Replay(Replay { answer, id: call.id, progress_token: call.progress_token }))),
            Reserve::CallerFull(full) => Err(IdempotencyError::CallerLimit { retry_after: full.retry_after }),
        }
    }
}

/// Whom a key belongs to: the user (token `sub`), else the verified agent.
fn identity(caller: Caller<'_>) -> Option<String> {
    if let Some(sub) = caller.sub {
        return Some(format!("sub:{sub}"));
    }
    caller.agent.map(|a| format!("agent:{a}"))
}

/// The store key: a digest of (identity, key), so neither is kept in clear (Redis, dumps).
fn journal_key(scope: &str, key: &str) -> String {
    let mut h = Sha256::new();
    h.update((scope.len() as u64).to_be_bytes());
    h.update(scope.as_bytes());
    h.update(key.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.finalize())
}

/// Wraps a forwarded call's response so its answer is recorded as it streams past, when
/// `claim` is this call's reservation (taken from it). Any other response is returned unchanged.
pub(crate) async fn record(claim: &mut Option<Claim>, resp: http::Response<ResponseBody>) -> http::Response<ResponseBody> {
    match claim.take() {
        Some(Claim::First(reservation)) => record::tee(reservation, resp).await,
        other => {
            *claim = other;
            resp
        }
    }
}

/// The forward failed (backend unreachable, timeout): gives the key back before the client
/// hears of it, so its retry is forwarded.
pub(crate) async fn release(claim: &mut Option<Claim>) {
    if let Some(Claim::First(reservation)) = claim.take() {
        reservation.release("released").await;
    }
}

/// The recorded answer, as this request's own, when `claim` is a replay.
pub(crate) fn replay_response(claim: Option<&Claim>) -> Option<http::Response<ResponseBody>> {
    match claim {
        Some(Claim::Replay(r)) => Some(replay::response(&r.answer, r.id.as_ref(), r.progress_token.as_ref())),
        _ => None,
    }
}

/// The decision log's `idempotency` for a call that was forwarded or answered with `claim`
/// (`is_answered`: from the journal, in enforce mode), or refused (or, in monitor mode, let
/// through) with `denial_code`: `first`, `replayed`, `would_replay`, `in_flight` or `reused`.
pub(crate) fn log_value(claim: Option<&Claim>, is_answered: bool, denial_code: Option<&str>) -> Option<&'static str> {
    match (claim, denial_code) {
        (Some(Claim::Replay(_)), _) if is_answered => Some("replayed"),
        (Some(Claim::Replay(_)), _) => Some("would_replay"),
        (Some(Claim::First(_)), _) => Some("first"),
        (None, Some("idempotency_in_flight")) => Some("in_flight"),
        (None, Some("idempotency_key_reused")) => Some("reused"),
        (None, _) => None,
    }
}
