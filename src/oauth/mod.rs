//! User authority (pipeline stage 7): the OAuth 2.1 bearer token of the MCP Authorization
//! spec, as the resource server checks it (MCP Authorization, RFC 6750, RFC 9068).
//!
//! [`TokenVerifier::authenticate`] takes the token only from `Authorization: Bearer <token68>`
//! (RFC 6750 §2.1; a token in the query string is never used and is refused by
//! [`TokenVerifier::check_query`]), then verifies it: a JWT (RFC 9068) against the issuer's
//! JWKS (`token`, `jwks`), or an opaque token by RFC 7662 introspection (`introspection`).
//! It trusts the configured issuer, the keys fetched over HTTPS from it, and nothing the client
//! sends beyond the token. A verified token is cached by the SHA-256 of its bytes until its
//! `exp` (bounded, moka), so a repeated token costs one hash and one lookup; the time window is
//! re-checked against each request's `now` on every hit.
//!
//! With `oauth.dpop`, `Authorization: DPoP <token>` and a `DPoP` proof are accepted too
//! (RFC 9449 §7.1, `dpop`): a token bound to a key (`cnf.jkt`) is spent only with a proof by
//! that key, never as a bearer token (§7.2). The binding is checked on every request, cache
//! hit or not, since it depends on the request ([`Binding`]).
//!
//! Malformed `Authorization` (not `Bearer <token68>`, sent twice) and query tokens are
//! RFC 6750 §3.1 `invalid_request` (400, the MCP Authorization spec's "malformed
//! authorization request"), not `invalid_token`: the client sent no token we could judge.

mod dpop;
mod introspection;
mod issuer;
mod jwks;
pub(crate) mod relying_party;
mod token;

pub use dpop::{Binding, Presented};

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Uri};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::config::{self, FieldError};
use crate::state::replay::{MemoryReplayStore, ReplayStore};
use crate::state::StoreError;
use crate::telemetry::TokenMetrics;
use crate::tls;
use portcullis_wire::dpop::DpopError;
use portcullis_wire::jose::{self, CompactError, Scheme};
use portcullis_wire::UnixTime;

/// Most verified introspection results are trusted for, even if `exp` is later: revocation at
/// the issuer takes effect within this time.
const INTROSPECTION_MAX_TTL: Duration = Duration::from_secs(60);

/// How long a token the introspection endpoint called inactive is refused without asking it
/// again: a client (or attacker) repeating a revoked or made-up opaque token causes one
/// introspection call per this time, not one per request. Short, so a token the issuer has
/// just minted (and a client sent a moment too early) is not refused for long.
const INACTIVE_TTL: Duration = Duration::from_secs(10);

/// Most inactive tokens remembered (each entry is the token's SHA-256, never the token); past
/// it the least used are forgotten.
const INACTIVE_MAX_ENTRIES: u64 = 10_000;

/// Why the token stage refused a request. Messages name what failed, never the token: nothing
/// the token carries is quoted except a registered `typ`/`alg` and the issuer's own `kid`
/// (a key it publishes); the configured issuer and audience are the operator's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No bearer token and `oauth.required = true`.
    #[error("a bearer token is required")]
    Missing,
    /// The `Authorization` header is not `Bearer <token68>` (RFC 6750 §2.1) or is sent twice.
    #[error("Authorization header is malformed: {0}")]
    MalformedHeader(&'static str),
    /// An `access_token` query parameter: MCP forbids tokens in the URI.
    #[error("access tokens in the query string are not accepted; send Authorization: Bearer")]
    TokenInQuery,
    /// The token is not a well-formed JWT (and no introspection endpoint is configured).
    #[error("token is malformed: {0}")]
    Malformed(String),
    /// The JWT header `typ` is not `at+jwt` (RFC 9068 §4).
    #[error("token type {typ:?} is not at+jwt")]
    WrongType {
        /// The `typ` sent (empty when absent) if it is a registered one, else "(unregistered)".
        typ: String,
    },
    /// `alg` is not RS256, PS256, ES256 or EdDSA (`none` and HMAC are refused here).
    #[error("token algorithm {alg:?} is not accepted")]
    UnsupportedAlgorithm {
        /// The `alg` sent if it is a registered one, else "(unregistered)".
        alg: String,
    },
    /// The JWT header has `crit` extensions, which the gateway does not implement (RFC 7515 §4.1.11).
    #[error("token header has critical extensions")]
    CriticalHeader,
    /// No issuer key has the token's `kid` (or, without a `kid`, is of the token's type), even
    /// after a refetch, or the refetch was within `oauth.jwks_refetch_interval`. The `kid` is
    /// the client's text and is not quoted.
    #[error("no issuer key matches the token's kid")]
    UnknownKeyId,
    /// The token's `kid` is unknown and a refetch would exceed `oauth.jwks_refetch_budget`:
    /// refused without asking the issuer.
    #[error("no issuer key matches the token's kid, and the JWKS refetch budget (oauth.jwks_refetch_budget) is exhausted")]
    RefetchBudgetExhausted,
    /// The key named by `kid` is not of the type (or JWK `alg`) the token's `alg` needs.
    #[error("issuer key {kid:?} cannot verify {alg}")]
    KeyMismatch {
        /// The key id.
        kid: String,
        /// The token's algorithm.
        alg: String,
    },
    /// The signature does not verify with the issuer's key.
    #[error("token signature is invalid")]
    BadSignature,
    /// A required claim is absent.
    #[error("token has no {claim} claim")]
    MissingClaim {
        /// The claim name.
        claim: &'static str,
    },
    /// A claim has the wrong JSON type.
    #[error("token claim {claim} has the wrong type")]
    InvalidClaim {
        /// The claim name.
        claim: &'static str,
    },
    /// `iss` is not the configured issuer (the `iss` sent is not quoted).
    #[error("token issuer is not the configured issuer")]
    WrongIssuer,
    /// `aud` does not contain this resource (RFC 8707): the token was minted for another one.
    #[error("token audience does not include {audience}")]
    WrongAudience {
        /// The audience this gateway requires.
        audience: String,
    },
    /// `exp` is past (beyond the clock skew).
    #[error("token expired at {exp}")]
    Expired {
        /// The `exp` claim.
        exp: u64,
    },
    /// `nbf` is in the future (beyond the clock skew).
    #[error("token not valid before {nbf}")]
    NotYetValid {
        /// The `nbf` claim.
        nbf: u64,
    },
    /// `iat` is in the future (beyond the clock skew).
    #[error("token issued in the future ({iat})")]
    IssuedInFuture {
        /// The `iat` claim.
        iat: u64,
    },
    /// Introspection says the token is not active (revoked, expired, unknown).
    #[error("token is not active")]
    Inactive,
    /// A token bound to a key (`cnf.jkt`) was sent as a bearer token (RFC 9449 §7.2).
    #[error("token is bound to a key (cnf.jkt): send it with Authorization: DPoP and a DPoP proof")]
    BoundTokenAsBearer,
    /// `oauth.require_sender_constrained`: the token has no `cnf`.
    #[error("token is not sender-constrained (no cnf); only DPoP-bound tokens are accepted")]
    NotSenderConstrained,
    /// `Authorization: DPoP` with a token that is not bound to a key (no `cnf.jkt`).
    #[error("token is not DPoP-bound (no cnf.jkt); send it with Authorization: Bearer")]
    NotDpopBound,
    /// The DPoP proof's key is not the key the token is bound to (RFC 9449 §7.1, Figure 16).
    #[error("DPoP proof key does not match the token's cnf.jkt")]
    KeyBindingMismatch,
    /// `cnf` names a proof-of-possession key the gateway cannot check (no `jkt`: `jwk`,
    /// `x5t#S256`…): ignoring it would make a bound token a bearer token.
    #[error("token is bound by a confirmation method the gateway cannot verify (cnf without jkt)")]
    UnsupportedConfirmation,
    /// The DPoP proof is invalid (RFC 9449 §4.3): `invalid_dpop_proof`.
    #[error("{0}")]
    Dpop(#[from] DpopError),
    /// The replay store could not record the proof's `jti`: fail closed.
    #[error("DPoP replay store: {0}")]
    ProofStore(StoreError),
    /// The issuer's metadata, JWKS or introspection endpoint could not be used; fail closed.
    #[error("issuer {issuer} unavailable: {reason}")]
    IssuerUnavailable {
        /// The configured issuer.
        issuer: String,
        /// What failed (URL, status, error).
        reason: String,
    },
}

impl From<CompactError> for TokenError {
    /// `compact` names what is wrong with the header or token; the stage adds its prefix and
    /// quotes `typ`/`alg` only when registered.
    fn from(e: CompactError) -> TokenError {
        match e {
            CompactError::MalformedHeader(why) => TokenError::MalformedHeader(why),
            CompactError::TooLong
            | CompactError::NotCompact
            | CompactError::NotBase64url { .. }
            | CompactError::NotJoseHeader(_)
            | CompactError::ClaimsNotObject(_) => TokenError::Malformed(e.to_string()),
            CompactError::WrongType { typ } => TokenError::WrongType { typ: jose::shown_typ(&typ).to_owned() },
            CompactError::UnsupportedAlgorithm { alg } => TokenError::UnsupportedAlgorithm { alg: jose::shown_alg(&alg).to_owned() },
            CompactError::CriticalHeader => TokenError::CriticalHeader,
        }
    }
}

/// Shortens issuer-supplied text quoted in errors (a published `kid`, a metadata `issuer`) to
/// 64 characters.
pub(crate) fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Proof that a bearer token was verified. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct VerifiedToken(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    iss: String,
    sub: Option<String>,
    aud: Vec<String>,
    scopes: Vec<String>,
    claims: Map<String, Value>,
    /// `claims` as the policy input holds them, converted on first use: a cached token is
    /// decided on many times.
    policy_claims: std::sync::OnceLock<Result<regorus::Value, crate::policy::ConvertError>>,
    client_id: Option<String>,
    exp: u64,
    nbf: Option<u64>,
    iat: Option<u64>,
    /// `cnf.jkt`: the thumbprint of the key the token is bound to (RFC 9449 §6.1).
    jkt: Option<String>,
    /// SHA-256 of the token as presented (the verified-token cache's key), set once by
    /// [`TokenVerifier::verify`]: later stages key their caches by it without hashing again.
    digest: std::sync::OnceLock<[u8; 32]>,
    /// `CallerKey::user(iss, sub)`, made on first use: per-caller bounds and caches look it up
    /// on every request with a cached token.
    user_key: std::sync::OnceLock<crate::state::caller::CallerKey>,
}

impl VerifiedToken {
    #[allow(clippy::too_many_arguments)]
    fn new(
        iss: String,
        sub: Option<String>,
        aud: Vec<String>,
        scopes: Vec<String>,
        claims: Map<String, Value>,
        client_id: Option<String>,
        exp: u64,
        nbf: Option<u64>,
        iat: Option<u64>,
        jkt: Option<String>,
    ) -> Self {
        VerifiedToken(Arc::new(Inner {
            iss,
            sub,
            aud,
            scopes,
            claims,
            policy_claims: std::sync::OnceLock::new(),
            client_id,
            exp,
            nbf,
            iat,
            jkt,
            digest: std::sync::OnceLock::new(),
            user_key: std::sync::OnceLock::new(),
        }))
    }

    /// SHA-256 of the token as it was presented, when the verifier recorded it (always for a
    /// token [`TokenVerifier::check`] returned).
    pub(crate) fn digest(&self) -> Option<&[u8; 32]> {
        self.0.digest.get()
    }

    /// Whom decision 13 counts this token's requests against, when it names a user (`sub`).
    pub(crate) fn user_key(&self) -> Option<&crate::state::caller::CallerKey> {
        let sub = self.0.sub.as_deref()?;
        Some(self.0.user_key.get_or_init(|| crate::state::caller::CallerKey::user(&self.0.iss, sub)))
    }

    /// The issuer (always the configured one).
    pub(crate) fn iss(&self) -> &str {
        &self.0.iss
    }
    /// The subject (the user), when the issuer named one (always for JWTs).
    pub(crate) fn sub(&self) -> Option<&str> {
        self.0.sub.as_deref()
    }
    /// The audiences; one of them is this resource.
    pub(crate) fn aud(&self) -> &[String] {
        &self.0.aud
    }
    /// The granted scopes, from `scope` and/or `scp`.
    pub(crate) fn scopes(&self) -> &[String] {
        &self.0.scopes
    }
    /// Every claim (JWT) or introspection member, for the policy input.
    pub fn claims(&self) -> &Map<String, Value> {
        &self.0.claims
    }
    /// [`Self::claims`] as a policy value (converted once per verified token). An error
    /// (claims nested too deep) must refuse the request, never leave the claims undefined.
    pub(crate) fn policy_claims(&self) -> Result<&regorus::Value, crate::policy::ConvertError> {
        self.0.policy_claims.get_or_init(|| portcullis_wire::rego_value::json_object(&self.0.claims)).as_ref().map_err(Clone::clone)
    }
    /// The OAuth client the token was issued to (`client_id`, or `azp`).
    pub fn client_id(&self) -> Option<&str> {
        self.0.client_id.as_deref()
    }
    /// Expiry, seconds since the epoch.
    pub(crate) fn exp(&self) -> u64 {
        self.0.exp
    }
    /// `cnf.jkt`: the RFC 7638 thumbprint of the key the token is bound to, if it is bound.
    pub(crate) fn jkt(&self) -> Option<&str> {
        self.0.jkt.as_deref()
    }

    /// The time window at `now` with `skew` seconds of tolerance (RFC 7519 §4.1.4–4.1.6).
    fn check_time(&self, now: UnixTime, skew: u64) -> Result<(), TokenError> {
        let t = now.secs();
        if t > self.0.exp.saturating_add(skew) {
            return Err(TokenError::Expired { exp: self.0.exp });
        }
        if let Some(nbf) = self.0.nbf.filter(|nbf| t.saturating_add(skew) < *nbf) {
            return Err(TokenError::NotYetValid { nbf });
        }
        if let Some(iat) = self.0.iat.filter(|iat| t.saturating_add(skew) < *iat) {
            return Err(TokenError::IssuedInFuture { iat });
        }
        Ok(())
    }
}

#[derive(Clone)]
struct Cached {
    token: VerifiedToken,
    ttl: Duration,
}

struct CachedExpiry;

impl moka::Expiry<[u8; 32], Cached> for CachedExpiry {
    fn expire_after_create(&self, _key: &[u8; 32], value: &Cached, _created_at: std::time::Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// The token stage, built from `[oauth]`.
pub struct TokenVerifier {
    is_required: bool,
    rules: token::Rules,
    jwks: jwks::Jwks,
    introspection: Option<introspection::Introspector>,
    cache: Option<moka::sync::Cache<[u8; 32], Cached>>,
    /// SHA-256 of opaque tokens introspection called inactive, for [`INACTIVE_TTL`].
    inactive: moka::sync::Cache<[u8; 32], ()>,
    metrics: TokenMetrics,
    /// `oauth.dpop`: the DPoP scheme is accepted and its proofs checked.
    dpop: Option<dpop::DpopCheck>,
    require_sender_constrained: bool,
}

/// A verified token and how it is bound to this request.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// The verified token (shared with the cache).
    pub token: VerifiedToken,
    /// How it is tied to whoever presented it, for this request.
    pub binding: Binding,
}

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier").field("is_required", &self.is_required).field("rules", &self.rules).field("jwks", &self.jwks).finish_non_exhaustive()
    }
}

impl TokenVerifier {
    /// Builds the stage from `[oauth]`; relative paths (`issuer_ca`) resolve against
    /// `base_dir`. Fails naming every bad field.
    pub fn new(cfg: &config::OAuth) -> Result<TokenVerifier, FieldError> {
        let issuer = cfg.issuer.clone().ok_or_else(|| FieldError::new("oauth.issuer", "required to verify bearer tokens (or set oauth.required = false)"))?;
        let client = tls::outbound_client("oauth.issuer_ca", cfg.issuer_ca.as_deref(), cfg.fetch_timeout)
            .map_err(|e| FieldError::new("oauth.issuer_ca", e.to_string()))?;
        let metrics = TokenMetrics::default();
        let issuer_client = issuer::IssuerClient::new(client, issuer.clone());
        let introspection = cfg
            .introspection
            .as_ref()
            .map(|i| introspection::Introspector::new(issuer_client.clone(), i.url.clone(), i.client_id.clone(), i.client_secret.clone()));
        let cache = (cfg.token_cache_size > 0).then(|| moka::sync::Cache::builder().max_capacity(cfg.token_cache_size).expire_after(CachedExpiry).build());
        // A store of its own until the gateway shares its replay store ([`Self::with_proof_store`]).
        let dpop = cfg.dpop.as_ref().map(|d| dpop::DpopCheck::new(d, cfg.clock_skew, Arc::new(MemoryReplayStore::new(100_000))));
        Ok(TokenVerifier {
            is_required: cfg.required,
            rules: token::Rules { issuer, audience: cfg.audience.clone(), skew_secs: cfg.clock_skew.as_secs() },
            jwks: jwks::Jwks::new(issuer_client, cfg.jwks_url.clone(), jwks::Refetch::new(cfg.jwks_refetch_interval, cfg.jwks_refetch_budget), metrics.clone()),
            introspection,
            cache,
            inactive: moka::sync::Cache::builder().max_capacity(INACTIVE_MAX_ENTRIES).time_to_live(INACTIVE_TTL).build(),
            metrics,
            dpop,
            require_sender_constrained: cfg.require_sender_constrained,
        })
    }

    /// Records DPoP proofs' `jti`s in `store` (the gateway's replay store: with Redis, a proof
    /// is accepted once across every instance).
    pub fn with_proof_store(mut self, store: Arc<dyn ReplayStore>) -> TokenVerifier {
        if let Some(d) = &mut self.dpop {
            d.set_store(store);
        }
        self
    }

    /// The stage's counters (token cache, JWKS fetches), for the metrics registry.
    pub(crate) fn metrics(&self) -> &TokenMetrics {
        &self.metrics
    }

    /// Refuses a request that carries `access_token` in its query (MCP-AUTH §Token
    /// Requirements: tokens MUST NOT be in the URI; RFC 6750 §2.3 is not supported).
    pub(crate) fn check_query(&self, uri: &Uri) -> Result<(), TokenError> {
        let query = uri.query().unwrap_or("");
        if url::form_urlencoded::parse(query.as_bytes()).any(|(k, _)| k == "access_token") {
            return Err(TokenError::TokenInQuery);
        }
        Ok(())
    }

    /// [`Self::check`] for a `POST /` by an unsigned agent: the token alone, for tests and
    /// benches of the token's own checks.
    pub async fn authenticate(&self, headers: &HeaderMap, now: UnixTime) -> Result<Option<VerifiedToken>, TokenError> {
        let req = Presented { method: "POST", path: "/", headers, body: &[], now, agent_key: None };
        Ok(self.check(&req).await?.map(|a| a.token))
    }

    /// Verifies the token of `req` (`Authorization: Bearer`, or `DPoP` with its proof when
    /// `oauth.dpop` is on) and its binding to this request. `Ok(None)`: no token was sent and
    /// none is required. A token that is sent is always verified, required or not.
    pub async fn check(&self, req: &Presented<'_>) -> Result<Option<Authenticated>, TokenError> {
        self.check_for(req, None).await
    }

    /// [`Self::check`] for the server whose resource is `audience` (`[[servers]]`, where the
    /// verifier is built without one audience): a token for another server's resource is
    /// refused (RFC 8707 §2, RFC 9068 §4), cached or not.
    pub async fn check_for(&self, req: &Presented<'_>, audience: Option<&str>) -> Result<Option<Authenticated>, TokenError> {
        let Some((scheme, token)) = jose::credentials(req.headers, self.dpop.is_some())? else {
            return if self.is_required { Err(TokenError::Missing) } else { Ok(None) };
        };
        let verified = self.verify(token, req.now).await?;
        if let Some(audience) = audience {
            if !verified.aud().iter().any(|a| a == audience) {
                return Err(TokenError::WrongAudience { audience: short(audience) });
            }
        }
        // Every request, cached token or not: the binding depends on the request.
        let binding = match (scheme, &self.dpop) {
            (Scheme::Dpop, Some(dpop)) => dpop.check(token, &verified, req).await?,
            // RFC 9449 §7.2: a bound token is never a bearer token, DPoP enabled or not.
            _ if verified.jkt().is_some() => return Err(TokenError::BoundTokenAsBearer),
            _ if self.require_sender_constrained => return Err(TokenError::NotSenderConstrained),
            _ => Binding::None,
        };
        self.metrics.binding(binding.as_str());
        Ok(Some(Authenticated { token: verified, binding }))
    }

    /// The token's own checks (signature or introspection, claims, time), from the cache when
    /// it was verified before.
    async fn verify(&self, token: &str, now: UnixTime) -> Result<VerifiedToken, TokenError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(cache) = &self.cache {
            if let Some(hit) = cache.get(&key) {
                self.metrics.token_cache(true);
                // The cache evicts on the wall clock; the window is decided by `now`.
                hit.token.check_time(now, self.rules.skew_secs)?;
                return Ok(hit.token);
            }
            self.metrics.token_cache(false);
        }
        let (verified, max_ttl) = if jose::looks_like_jwt(token) || self.introspection.is_none() {
            (self.verify_jwt(token, now).await?, None)
        } else if let Some(i) = &self.introspection {
            (self.introspect(i, key, token, now).await?, Some(INTROSPECTION_MAX_TTL))
        } else {
            return Err(TokenError::Malformed("not a JWT".into()));
        };
        // A token's digest is its own: the same string always hashes alike.
        let _ = verified.0.digest.set(key);
        if let Some(cache) = &self.cache {
            let left = Duration::from_secs(verified.exp().saturating_add(self.rules.skew_secs).saturating_sub(now.secs()));
            let ttl = max_ttl.map_or(left, |m| left.min(m));
            if !ttl.is_zero() {
                cache.insert(key, Cached { token: verified.clone(), ttl });
            }
        }
        Ok(verified)
    }

    /// Introspects `token` (whose SHA-256 is `key`), unless it was called inactive within
    /// [`INACTIVE_TTL`]: then it is refused as inactive again without asking.
    async fn introspect(&self, i: &introspection::Introspector, key: [u8; 32], token: &str, now: UnixTime) -> Result<VerifiedToken, TokenError> {
        if self.inactive.contains_key(&key) {
            self.metrics.token_cache_inactive_hit();
            return Err(TokenError::Inactive);
        }
        let verified = i.introspect(token, &self.rules, now).await;
        if matches!(verified, Err(TokenError::Inactive)) {
            self.inactive.insert(key, ());
        }
        verified
    }

    async fn verify_jwt(&self, token: &str, now: UnixTime) -> Result<VerifiedToken, TokenError> {
        // Header rules (typ, alg) first: a `none` or HMAC token never causes a fetch.
        let jwt = token::decode(token)?;
        let keys = self.jwks.keys_for(jwt.kid.as_deref(), jwt.alg, now).await?;
        let mut last = TokenError::BadSignature;
        for key in &keys {
            match token::verify_signature(&jwt, key) {
                Ok(()) => return token::validate_jwt(jwt, &self.rules, now),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// RFC 8414 discovery of `issuer`'s `token_endpoint` (for token exchange, `upstream.auth`),
/// as the login finds it ([`issuer::IssuerClient::metadata`]). `Err` says what failed, naming
/// the URL.
pub(crate) async fn discover_token_endpoint(client: &reqwest::Client, issuer: &str) -> Result<url::Url, String> {
    let fetcher = issuer::IssuerClient::new(client.clone(), issuer.to_owned());
    fetcher.metadata().await.and_then(|md| md.endpoint(&fetcher, "token_endpoint")).map_err(|e| e.to_string())
}

/// The token of `Authorization: Bearer <token68>` (`jose::bearer_token`). `Ok(None)` when
/// there is no `Authorization` header.
#[cfg(test)]
pub(crate) fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, TokenError> {
    Ok(jose::bearer_token(headers)?)
}

#[cfg(test)]
use portcullis_test_support::keys as test_keys;

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "refusal_text_tests.rs"]
mod refusal_text_tests;
