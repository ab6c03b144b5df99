//! The issuer's signing keys (pipeline stage 7): JWKS fetch (from `oauth.jwks_url` or the
//! metadata's `jwks_uri`) and the cache; parsing is in `documents.rs`.
//!
//! The key set is cached (moka) for the `Cache-Control` `max-age` the issuer sent, clamped to
//! `MIN_TTL`..`MAX_TTL`; concurrent misses share one fetch. A `kid` not in the set causes
//! one refetch (key rotation without restart), at most once per `oauth.jwks_refetch_interval`
//! measured on the requests' clock (a request timed earlier than the last refetch counts as
//! within the interval: requests race), and at most `oauth.jwks_refetch_budget` per minute
//! whatever the interval allows, so forged kids cannot make the gateway hammer the issuer.
//! Only asymmetric keys usable for RS256/PS256 (RSA), ES256 (P-256) and EdDSA (Ed25519) are
//! kept; symmetric (`oct`) keys and `use = "enc"` keys are ignored. Unreachable issuer: error,
//! remembered for [`FAILURE_MEMORY`] so a flood of tokens against a failing issuer causes one
//! fetch a second, not one each.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::Algorithm;
use tokio::sync::OnceCell;
use url::Url;

use super::issuer::{FetchError, IssuerClient};
use super::{short, TokenError};
use crate::directory::FetchBudget;
use crate::telemetry::TokenMetrics;
pub(crate) use portcullis_wire::issuer_documents::{ttl_from_cache_control, KeyKind, KeySet, PublicKey};
#[cfg(test)]
pub(crate) use portcullis_wire::issuer_documents::{DEFAULT_TTL, MAX_TTL, MIN_TTL};
use portcullis_wire::UnixTime;

/// The key kind an algorithm needs.
pub(crate) fn key_kind(alg: Algorithm) -> Option<KeyKind> {
    match alg {
        Algorithm::RS256 | Algorithm::PS256 => Some(KeyKind::Rsa),
        Algorithm::ES256 => Some(KeyKind::EcP256),
        Algorithm::EdDSA => Some(KeyKind::Ed25519),
        _ => None,
    }
}

/// How long a failed fetch is remembered: while the issuer fails, requests (any token shape
/// reaches the key lookup) cause one fetch per this time, not one each. Matches the
/// `Retry-After: 1` of the `issuer_unavailable` refusal.
pub(crate) const FAILURE_MEMORY: Duration = Duration::from_secs(1);

/// The cached key set of one issuer.
pub(crate) struct Jwks {
    client: IssuerClient,
    configured_url: Option<Url>,
    discovered_url: OnceCell<Url>,
    cache: moka::future::Cache<(), Arc<KeySet>>,
    refetch: Refetch,
    /// The last failed fetch of an empty cache, and when (the request's clock).
    last_failure: Mutex<Option<(UnixTime, TokenError)>>,
    metrics: TokenMetrics,
}

/// The limits on unknown-`kid` refetches: an interval and a per-minute budget.
pub(crate) struct Refetch {
    interval: Duration,
    last: Mutex<Option<UnixTime>>,
    budget: FetchBudget,
}

impl Refetch {
    /// `oauth.jwks_refetch_interval` and `oauth.jwks_refetch_budget`.
    pub(crate) fn new(interval: Duration, per_minute: u32) -> Refetch {
        Refetch { interval, last: Mutex::new(None), budget: FetchBudget::per_minute(per_minute) }
    }

    /// Takes the refetch slot at `now`: `Ok(true)` to refetch, `Ok(false)` when the last
    /// refetch is within the interval, `Err` when the budget is exhausted.
    fn take(&self, now: UnixTime) -> Result<bool, TokenError> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        // A `now` earlier than the last refetch is a request that raced it: within the interval.
        if last.is_some_and(|t| now.0 < t.0 + self.interval) {
            return Ok(false);
        }
        if !self.budget.try_take(now) {
            return Err(TokenError::RefetchBudgetExhausted);
        }
        *last = Some(now);
        Ok(true)
    }
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks").field("issuer", &self.client.issuer).field("configured_url", &self.configured_url).finish_non_exhaustive()
    }
}

struct SetExpiry;

impl moka::Expiry<(), Arc<KeySet>> for SetExpiry {
    fn expire_after_create(&self, _key: &(), value: &Arc<KeySet>, _created_at: std::time::Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

impl Jwks {
    /// `configured_url` is `oauth.jwks_url`; without it the URL is discovered once.
    pub(crate) fn new(client: IssuerClient, configured_url: Option<Url>, refetch: Refetch, metrics: TokenMetrics) -> Jwks {
        let cache = moka::future::Cache::builder().max_capacity(1).expire_after(SetExpiry).build();
        Jwks { client, configured_url, discovered_url: OnceCell::new(), cache, refetch, last_failure: Mutex::new(None), metrics }
    }

    /// The keys that may verify a token with `kid` and `alg`: from the cached set, or after
    /// one rate-limited refetch when the set does not know `kid`.
    pub(crate) async fn keys_for(&self, kid: Option<&str>, alg: Algorithm, now: UnixTime) -> Result<Vec<PublicKey>, TokenError> {
        let kind = key_kind(alg).ok_or_else(|| TokenError::UnsupportedAlgorithm { alg: format!("{alg:?}") })?;
        let set = self.key_set(now).await?;
        let found: Vec<PublicKey> = set.candidates(kid, kind).into_iter().cloned().collect();
        if !found.is_empty() {
            return Ok(found);
        }
        let Some(kid) = kid else {
            return Err(TokenError::UnknownKeyId);
        };
        if set.has_kid(kid) {
            // The issuer publishes this kid: quoting it quotes the issuer, not the client.
            return Err(TokenError::KeyMismatch { kid: short(kid), alg: format!("{alg:?}") });
        }
        match self.refetch.take(now) {
            Ok(true) => {}
            Ok(false) => return Err(TokenError::UnknownKeyId),
            Err(e) => {
                self.metrics.jwks_budget_exhausted();
                static THROTTLE: crate::throttle::Throttle = crate::throttle::Throttle::new();
                if let Some(held) = THROTTLE.admit() {
                    tracing::warn!(similar_held_back = held, "JWKS refetch refused: oauth.jwks_refetch_budget exhausted");
                }
                return Err(e);
            }
        }
        // Unknown kid: the issuer may have rotated its keys (RFC 7517 §4.5 hints at this use).
        let fresh = self.fetch().await?;
        self.cache.insert((), fresh.clone()).await;
        let found: Vec<PublicKey> = fresh.candidates(Some(kid), kind).into_iter().cloned().collect();
        if found.is_empty() {
            return Err(TokenError::UnknownKeyId);
        }
        Ok(found)
    }

    /// The cached key set, or one fetch shared by concurrent misses. A failure is remembered
    /// for [`FAILURE_MEMORY`]: meanwhile requests get it again without a fetch.
    async fn key_set(&self, now: UnixTime) -> Result<Arc<KeySet>, TokenError> {
        if let Some(set) = self.cache.get(&()).await {
            return Ok(set);
        }
        // The fetch's future (an HTTP exchange) is several KiB: boxed here, on the rare miss,
        // it does not swell every request's future (moved into a new task per request).
        Box::pin(self.key_set_missed(now)).await
    }

    /// [`Jwks::key_set`] after a cache miss: remembered failures, else one fetch for all.
    async fn key_set_missed(&self, now: UnixTime) -> Result<Arc<KeySet>, TokenError> {
        {
            let last = self.last_failure.lock().unwrap_or_else(|p| p.into_inner());
            // A request timed before the failure (requests race) is within the memory too.
            if let Some((at, e)) = last.as_ref().filter(|(at, _)| now.0 < at.0 + FAILURE_MEMORY) {
                tracing::debug!(failed_at = at.secs(), "JWKS fetch failed moments ago; not asking again yet");
                return Err(e.clone());
            }
        }
        self.cache.try_get_with((), self.fetch()).await.map_err(|e| {
            let e = (*e).clone();
            *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, e.clone()));
            e
        })
    }

    /// Puts `set` in the cache as if it had been fetched (unit tests without an issuer).
    #[cfg(test)]
    pub(crate) async fn preload(&self, set: KeySet) {
        self.cache.insert((), Arc::new(set)).await;
    }

    /// Takes the unknown-kid refetch slot, as `keys_for` does (unit tests).
    #[cfg(test)]
    pub(crate) fn may_refetch_for_test(&self, now: UnixTime) -> Result<bool, TokenError> {
        self.refetch.take(now)
    }

    async fn url(&self) -> Result<Url, TokenError> {
        if let Some(u) = &self.configured_url {
            return Ok(u.clone());
        }
        self.discovered_url.get_or_try_init(|| self.client.discover_jwks_uri()).await.cloned()
    }

    async fn fetch(&self) -> Result<Arc<KeySet>, TokenError> {
        let result = self.fetch_once().await;
        self.metrics.jwks_fetch(if result.is_ok() { "ok" } else { "error" });
        if let Err(e) = &result {
            tracing::warn!(error = %e, "JWKS fetch failed");
        }
        result
    }

    async fn fetch_once(&self) -> Result<Arc<KeySet>, TokenError> {
        let url = self.url().await?;
        let what = format!("JWKS {url}");
        let doc = self.client.get(&url).await.map_err(|e| match e {
            FetchError::Unreachable(r) | FetchError::Refused(r) => self.client.unavailable(&what, r),
        })?;
        let ttl = ttl_from_cache_control(doc.cache_control.as_deref());
        let set = KeySet::parse(&doc.body, ttl).map_err(|r| self.client.unavailable(&what, r))?;
        tracing::debug!(keys = set.keys.len(), ttl = ?ttl, "JWKS fetched");
        Ok(Arc::new(set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EC_X: &str = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU";
    const EC_Y: &str = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0";

    #[test]
    fn cache_control_max_age_is_clamped() {
        assert_eq!(ttl_from_cache_control(None), DEFAULT_TTL);
        assert_eq!(ttl_from_cache_control(Some("public, max-age=600")), Duration::from_secs(600));
        assert_eq!(ttl_from_cache_control(Some("max-age=1")), MIN_TTL);
        assert_eq!(ttl_from_cache_control(Some("max-age=99999999")), MAX_TTL);
        assert_eq!(ttl_from_cache_control(Some("no-store")), MIN_TTL);
    }

    #[test]
    fn unusable_keys_are_skipped_not_fatal() {
        let doc = format!(
            r#"{{"keys":[
                {{"kty":"oct","k":"c2VjcmV0","kid":"hmac"}},
                {{"kty":"EC","crv":"P-256","x":"{EC_X}","y":"{EC_Y}","kid":"enc","use":"enc"}},
                {{"kty":"EC","crv":"P-384","x":"{EC_X}","y":"{EC_Y}","kid":"p384"}},
                {{"kty":"EC","crv":"P-256","x":"{EC_X}","y":"{EC_Y}","kid":"ec1","alg":"ES256"}},
                {{"kty":"weird"}}
            ]}}"#
        );
        let set = KeySet::parse(doc.as_bytes(), DEFAULT_TTL).expect("parses");
        assert_eq!(set.keys.len(), 1);
        assert_eq!(set.candidates(Some("ec1"), KeyKind::EcP256).len(), 1);
        assert!(set.candidates(Some("hmac"), KeyKind::EcP256).is_empty());
        assert!(set.candidates(Some("ec1"), KeyKind::Rsa).is_empty());
        assert_eq!(set.candidates(None, KeyKind::EcP256).len(), 1);
        assert!(KeySet::parse(b"[]", DEFAULT_TTL).is_err());
    }
}
