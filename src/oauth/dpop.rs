//! The sender constraint of stage 7 (RFC 9449 §7.1, PRODUCT "sender-constrained tokens"): a
//! token bound to a key (`cnf.jkt`) is spent only with a DPoP proof by that key, made for this
//! request, once. When that key is also the key of the request's HTTP Message Signature, the
//! user's token, the proof and the agent identity are one key: binding `agent_key`.
//!
//! The proof itself is read and verified by `portcullis_wire::dpop` (pure); this adds what
//! needs the gateway: its public origins for `htu`, the configured window, the single use of
//! each `jti` in the shared replay store (so exactly one of several instances on one Redis
//! accepts a proof), and the agent's key from stage 5. It runs on every request, whether the
//! token's verification came from the cache or not: the binding depends on the request.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::HeaderMap;
use sha2::{Digest, Sha256};

use super::{TokenError, VerifiedToken};
use crate::config;
use crate::state::replay::ReplayStore;
use ed25519_dalek::VerifyingKey;
use portcullis_wire::dpop::{self, DpopError};
use portcullis_wire::signature::ed25519_thumbprint;
use portcullis_wire::UnixTime;

/// How the token is tied to whoever presented it: the policy input's `token.binding`, the
/// decision log's `binding`, the `token_bindings` metric's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binding {
    /// A bearer token: whoever holds it can spend it.
    None,
    /// A DPoP-bound token with a valid proof of its key (`cnf.jkt`).
    Dpop,
    /// As `Dpop`, and the proof key is the key that signed the request (RFC 9421): the token
    /// works only for this agent.
    AgentKey,
}

impl Binding {
    /// The name in policy input, logs and metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Binding::None => "none",
            Binding::Dpop => "dpop",
            Binding::AgentKey => "agent_key",
        }
    }
}

/// The request facts the binding checks read, beyond the token.
#[derive(Debug, Clone, Copy)]
pub struct Presented<'a> {
    /// The HTTP method, as received.
    pub method: &'a str,
    /// The request path as received (no query).
    pub path: &'a str,
    /// The request headers (`Authorization`, `DPoP`).
    pub headers: &'a HeaderMap,
    /// The raw body (a proof's `content_digest`, MCP DPoP extension).
    pub body: &'a [u8],
    /// The request's one clock reading.
    pub now: UnixTime,
    /// The key that verified the request's HTTP Message Signature (stage 5), when one did and
    /// was fresh (stage 6). Its RFC 7638 thumbprint is computed only when a DPoP proof is
    /// compared with it, not for every signed request.
    pub agent_key: Option<&'a VerifyingKey>,
}

/// Least time a `jti` record is kept, so a proof right at the end of its window is recorded.
const MIN_TTL: Duration = Duration::from_secs(1);

/// DPoP checks, built from `[oauth]` when `oauth.dpop = true`.
pub(crate) struct DpopCheck {
    max_age_secs: u64,
    skew_secs: u64,
    require_agent_key: bool,
    origins: Vec<String>,
    store: Arc<dyn ReplayStore>,
}

impl DpopCheck {
    pub(crate) fn new(cfg: &config::Dpop, skew: Duration, store: Arc<dyn ReplayStore>) -> DpopCheck {
        DpopCheck {
            max_age_secs: cfg.max_age.as_secs(),
            skew_secs: skew.as_secs(),
            require_agent_key: cfg.require_agent_key_binding,
            origins: cfg.origins.clone(),
            store,
        }
    }

    pub(crate) fn set_store(&mut self, store: Arc<dyn ReplayStore>) {
        self.store = store;
    }

    /// RFC 9449 §7.1 for `Authorization: DPoP <token>`: the proof is valid for this request
    /// (§4.3), its key is the one the token is bound to, and its `jti` is new. The single use
    /// is recorded last, so a proof refused for another reason does not use its `jti` up.
    pub(crate) async fn check(&self, token: &str, verified: &VerifiedToken, req: &Presented<'_>) -> Result<Binding, TokenError> {
        let text = dpop::proof_header(req.headers)?.ok_or(DpopError::Missing)?;
        let proof = dpop::parse(text)?;
        let uris: Vec<String> = self.origins.iter().filter_map(|o| dpop::normalise_htu(&format!("{o}{}", req.path))).collect();
        let request = dpop::Request {
            method: req.method,
            uris: &uris,
            access_token: token,
            body: req.body,
            now: req.now,
            max_age_secs: self.max_age_secs,
            skew_secs: self.skew_secs,
        };
        proof.check(&request)?;
        let jkt = verified.jkt().ok_or(TokenError::NotDpopBound)?;
        if jkt != proof.jkt() {
            return Err(TokenError::KeyBindingMismatch);
        }
        // Compared with the thumbprint computed from the verifying key, never the keyid sent.
        let is_agent_key = req.agent_key.is_some_and(|key| ed25519_thumbprint(key) == proof.jkt());
        if self.require_agent_key && !is_agent_key {
            return Err(DpopError::NotAgentKey.into());
        }
        // Kept one clock skew longer than this instance's clock says the proof is usable: an
        // instance whose clock runs behind by up to the skew still finds the record.
        let until = Duration::from_secs(proof.usable_until(self.max_age_secs, self.skew_secs).saturating_add(self.skew_secs));
        let ttl = until.saturating_sub(req.now.0).max(MIN_TTL);
        // Hashed: a long jti costs the store no more than a short one (§11.1).
        let key = format!("dpop:{}:{}", proof.jkt(), URL_SAFE_NO_PAD.encode(Sha256::digest(proof.jti().as_bytes())));
        if !self.store.first_use(&key, ttl).await.map_err(TokenError::ProofStore)? {
            return Err(DpopError::Replayed.into());
        }
        Ok(if is_agent_key { Binding::AgentKey } else { Binding::Dpop })
    }
}
