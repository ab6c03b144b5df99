//! `kind = "token_exchange"`: RFC 8693 token exchange at the user's issuer, cached.
//!
//! The subject token is the request's verified access token; the answer is checked (RFC 8693
//! §2.2.1: `access_token`, `issued_token_type`, `token_type`) before the backend gets it. The
//! token endpoint is trusted like the issuer (`oauth.issuer_ca`, https only, no redirects:
//! `tls::outbound_client`). Issued tokens live only in this cache, as sensitive header values;
//! they are never logged.

use std::time::Duration;

use bytes::BytesMut;
use http::HeaderValue;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use url::Url;

use super::actor::{ActorSigner, ClientAssertion, JWT_BEARER, JWT_TOKEN_TYPE};
use super::CredentialError;
use crate::config::{self, FieldError, SecretSource};
use crate::oauth::VerifiedToken;
use crate::state::caller::CallerKey;
use portcullis_wire::UnixTime;

/// RFC 8693 §2.1 `grant_type`.
const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 §3: an OAuth 2.0 access token.
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// Largest token-endpoint answer read.
const MAX_ANSWER: usize = 64 * 1024;
/// Issued tokens kept at most, for all callers together.
const MAX_ENTRIES: u64 = config::MAX_CACHED;
/// Taken off an issued token's `expires_in`, so it is never sent about to expire.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// Longest an issued token without `expires_in` is kept.
const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// Why an exchange was not asked for: `upstream.auth.max_per_second` is spent.
const OVER_BUDGET: &str = "more token exchanges per second than upstream.auth.max_per_second";

/// The issuer's error codes that refuse *this* delegation (RFC 6749 §5.2, RFC 8693 §2.2.2,
/// RFC 8707 §2): 403 `delegation_refused`. Any other error is the gateway's problem (503).
const REFUSALS: [&str; 5] = ["invalid_grant", "invalid_request", "access_denied", "invalid_target", "invalid_scope"];

/// A cache key: the caller (`CallerKey::short`), the verified agent, the subject token (by
/// SHA-256), the scope asked for.
type Key = (u128, Option<String>, [u8; 32], Option<String>);

/// Live cache entries per caller (decision 13): a slot is taken before an entry is made and
/// freed when the entry leaves the cache (or was never made).
#[derive(Default)]
struct CallerSlots(std::sync::Mutex<std::collections::HashMap<u128, u64>>);

impl CallerSlots {
    /// Takes one of `caller`'s slots unless it holds `bound` already.
    fn take(&self, caller: u128, bound: u64) -> bool {
        let Ok(mut held) = self.0.lock() else { return false };
        let n = held.entry(caller).or_insert(0);
        if *n >= bound {
            return false;
        }
        *n += 1;
        true
    }

    fn free(&self, caller: u128) {
        let Ok(mut held) = self.0.lock() else { return };
        if let std::collections::hash_map::Entry::Occupied(mut e) = held.entry(caller) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

/// An issued token as the backend gets it (`Bearer <token>`, sensitive), and how long to keep it.
#[derive(Clone)]
struct Issued {
    header: HeaderValue,
    ttl: Duration,
}

struct IssuedExpiry;

impl moka::Expiry<Key, Issued> for IssuedExpiry {
    fn expire_after_create(&self, _key: &Key, value: &Issued, _created_at: std::time::Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// The exchanges' counters: `portcullis_upstream_token_exchanges_total{result}`.
#[derive(Debug, Clone, Default)]
pub struct ExchangeMetrics {
    /// By `result`: `issued`, `cached`, `refused`, `unavailable`, `over_budget`.
    pub exchanges: Family<Vec<(String, String)>, Counter>,
    /// The `cached` series, found once: a cache hit counts without building a label set.
    cached: std::sync::OnceLock<Counter>,
}

impl ExchangeMetrics {
    fn count(&self, result: &str) {
        if result == "cached" {
            self.cached.get_or_init(|| self.exchanges.get_or_create(&vec![("result".to_owned(), "cached".to_owned())]).clone()).inc();
            return;
        }
        self.exchanges.get_or_create(&vec![("result".to_owned(), result.to_owned())]).inc();
    }
}

/// How the gateway authenticates as its client.
enum Client {
    /// `client_id` and secret, form-urlencoded for HTTP Basic (RFC 6749 §2.3.1).
    Basic(String, SecretString),
    /// `private_key_jwt`: `client_id` in the form, with a fresh assertion.
    KeyJwt(String, ClientAssertion),
}

/// The token-exchange client of one backend.
pub(super) struct Exchanger {
    http: reqwest::Client,
    /// `oauth.issuer`: where the token endpoint is discovered.
    issuer: String,
    configured: Option<Url>,
    discovered: tokio::sync::OnceCell<Url>,
    client: Client,
    audience: Option<String>,
    resource: Option<String>,
    scope: Option<String>,
    exchange_bound_tokens: bool,
    cache: moka::future::Cache<Key, Issued>,
    /// Entries each caller holds in `cache`, at most `per_caller`.
    slots: std::sync::Arc<CallerSlots>,
    per_caller: u64,
    pub(super) metrics: ExchangeMetrics,
    /// `actor = true`: signs the actor token of each exchange.
    pub(super) actor: Option<ActorSigner>,
    /// `max_per_second`: exchanges (not cache hits) per second.
    budget: crate::directory::FetchBudget,
}

impl Exchanger {
    /// The client `cfg` describes, at `oauth`'s issuer; `origin` is the gateway's public origin
    /// (the `iss` of its actor tokens).
    pub(super) fn new(cfg: &config::TokenExchange, oauth: &config::OAuth, origin: &str) -> Result<Exchanger, FieldError> {
        let issuer = oauth.issuer.clone().ok_or_else(|| FieldError::new("oauth.issuer", "required with upstream.auth.kind = \"token_exchange\""))?;
        let http = crate::tls::outbound_client("oauth.issuer_ca", oauth.issuer_ca.as_deref(), cfg.timeout)
            .map_err(|e| FieldError::new("oauth.issuer_ca", e.to_string()))?;
        let form = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let client = match &cfg.client_auth {
            config::ClientAuth::Secret(source) => {
                let secret = match source {
                    SecretSource::Value(v) => v,
                    SecretSource::File { first, .. } => first,
                };
                Client::Basic(form(&cfg.client_id), SecretString::from(form(secret.expose_secret())))
            }
            config::ClientAuth::KeyJwt(path) => Client::KeyJwt(cfg.client_id.clone(), ClientAssertion::new(path, cfg.client_id.clone(), issuer.clone())?),
        };
        let slots = std::sync::Arc::new(CallerSlots::default());
        let freed = slots.clone();
        let cache = moka::future::Cache::builder()
            .max_capacity(MAX_ENTRIES)
            .expire_after(IssuedExpiry)
            .eviction_listener(move |key: std::sync::Arc<Key>, _, cause| {
                // A replaced entry keeps its slot; every other way out frees it.
                if cause != moka::notification::RemovalCause::Replaced {
                    freed.free(key.0);
                }
            })
            .build();
        let actor = cfg.actor.as_ref().map(|keys| ActorSigner::new(keys, origin.to_owned(), issuer.clone(), cfg.client_id.clone())).transpose()?;
        Ok(Exchanger {
            actor,
            budget: crate::directory::FetchBudget::per_second(cfg.max_per_second),
            http,
            issuer,
            configured: cfg.token_endpoint.clone(),
            discovered: tokio::sync::OnceCell::new(),
            client,
            audience: cfg.audience.clone(),
            resource: cfg.resource.clone(),
            scope: cfg.scope.clone(),
            exchange_bound_tokens: cfg.exchange_bound_tokens,
            cache,
            slots,
            per_caller: cfg.max_cached_per_caller,
            metrics: ExchangeMetrics::default(),
        })
    }

    /// Drops the cached token whose header is `header` (the backend refused it).
    pub(super) async fn forget(&self, header: &HeaderValue) {
        let refused: Vec<_> = self.cache.iter().filter(|(_, issued)| issued.header == header).map(|(k, _)| k).collect();
        for key in refused {
            self.cache.invalidate(&*key).await;
        }
    }

    /// The backend's `Authorization` for `token` (presented in `headers`, read again only to
    /// exchange it) and the agent `agent`, and whether it came from the cache. One exchange per
    /// key at a time: concurrent requests with the key wait for it. `narrowed`: the decision's
    /// `upstream_scopes`, when it named any.
    pub(super) async fn credential(
        &self,
        token: &VerifiedToken,
        headers: &http::HeaderMap,
        agent: Option<&str>,
        narrowed: Option<&[String]>,
        now: UnixTime,
    ) -> Result<(HeaderValue, bool), CredentialError> {
        // A bound token's holder proved its key to the gateway; the issued token would be a
        // bearer token nobody proves anything for: an operator's choice, not a default.
        if token.jkt().is_some() && !self.exchange_bound_tokens {
            self.metrics.count("refused");
            return Err(CredentialError::Refused("dpop_bound_subject_token".to_owned()));
        }
        // With `actor`, the issued token says which agent acted: without a verified one there is
        // nobody to name, and a token without `act` is not what the backend was promised.
        if self.actor.is_some() && agent.is_none() {
            self.metrics.count("refused");
            return Err(CredentialError::Refused("no_verified_agent".to_owned()));
        }
        let scope = self.scope_for(narrowed)?;
        let caller = caller_of(token, agent).short();
        // The token stage hashed this very token for its own cache: a hit needs nothing more of
        // the request (the header is read again, and the token sent, only to exchange it).
        let digest: [u8; 32] = match token.digest() {
            Some(d) => *d,
            None => Sha256::digest(subject_of(headers)?.as_bytes()).into(),
        };
        let key: Key = (caller, agent.map(str::to_owned), digest, scope.clone());
        // Never past the subject token's own expiry.
        let left = Duration::from_secs(token.exp().saturating_sub(now.secs()));
        if let Some(hit) = self.cache.get(&key).await {
            self.metrics.count("cached");
            return Ok((hit.header, true));
        }
        let subject = subject_of(headers)?;
        // A caller holding its share of the cache still gets its credential, exchanged for this
        // call and not kept: the issuer stays behind `max_per_second`, the others keep theirs.
        // Expired entries free their slots when the cache gets round to evicting them: at its
        // share, a caller first lets it, so a slot whose token expired is not held on to.
        let mut has_slot = self.slots.take(caller, self.per_caller);
        if !has_slot {
            self.cache.run_pending_tasks().await;
            has_slot = self.slots.take(caller, self.per_caller);
        }
        if !has_slot {
            let issued = self.exchange(subject, agent, scope.as_deref(), now, left).await;
            return self.counted(issued.map(|i| (i.header, false)));
        }
        let entry = self.cache.entry(key).or_try_insert_with(self.exchange(subject, agent, scope.as_deref(), now, left)).await;
        if !matches!(&entry, Ok(e) if e.is_fresh()) {
            // Nothing added for this call (another call's entry, or a failure): the slot goes back.
            self.slots.free(caller);
        }
        self.counted(match entry {
            Ok(e) => {
                let cached = !e.is_fresh();
                Ok((e.into_value().header, cached))
            }
            Err(e) => Err((*e).clone()),
        })
    }

    /// Counts an outcome in the metrics and passes it on.
    fn counted(&self, outcome: Result<(HeaderValue, bool), CredentialError>) -> Result<(HeaderValue, bool), CredentialError> {
        match outcome {
            Ok((header, cached)) => {
                self.metrics.count(if cached { "cached" } else { "issued" });
                Ok((header, cached))
            }
            Err(e) => {
                self.metrics.count(match &e {
                    CredentialError::Refused(_) => "refused",
                    CredentialError::Unavailable(r) if r == OVER_BUDGET => "over_budget",
                    CredentialError::Unavailable(_) => "unavailable",
                });
                Err(e)
            }
        }
    }

    /// One exchange (for `agent`, at `now`): the issued token and how long it may be kept (at
    /// most `left`).
    async fn exchange(&self, subject: &str, agent: Option<&str>, scope: Option<&str>, now: UnixTime, left: Duration) -> Result<Issued, CredentialError> {
        // The issuer is shared by every user: a burst of new tokens must not flood it.
        if !self.budget.try_take(now) {
            return Err(CredentialError::Unavailable(OVER_BUDGET.to_owned()));
        }
        let endpoint = self.endpoint().await?;
        let actor_token = match (&self.actor, agent) {
            (Some(signer), Some(agent)) => Some(signer.token(agent, now).map_err(CredentialError::Unavailable)?),
            _ => None,
        };
        let mut form: Vec<(&str, &str)> = vec![
            ("grant_type", GRANT_TYPE),
            ("subject_token", subject),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
        ];
        for (name, value) in [("audience", self.audience.as_deref()), ("resource", self.resource.as_deref()), ("scope", scope)] {
            if let Some(v) = value {
                form.push((name, v));
            }
        }
        if let Some(t) = &actor_token {
            form.push(("actor_token", t));
            form.push(("actor_token_type", JWT_TOKEN_TYPE));
        }
        let assertion = match &self.client {
            Client::KeyJwt(client_id, a) => Some((client_id, a.assertion(now).map_err(CredentialError::Unavailable)?)),
            Client::Basic(..) => None,
        };
        if let Some((client_id, a)) = &assertion {
            form.push(("client_id", client_id));
            form.push(("client_assertion_type", JWT_BEARER));
            form.push(("client_assertion", a));
        }
        let unavailable = |what: String| CredentialError::Unavailable(format!("token exchange at {endpoint}: {what}"));
        let mut req = self.http.post(endpoint.clone()).header(http::header::ACCEPT, "application/json");
        if let Client::Basic(id, secret) = &self.client {
            req = req.basic_auth(id, Some(secret.expose_secret()));
        }
        let req = req.form(&form);
        let mut resp = req.send().await.map_err(|e| unavailable(crate::telemetry::error_chain(&e)))?;
        let status = resp.status();
        let mut body = BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| unavailable(crate::telemetry::error_chain(&e)))? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(unavailable(format!("answer larger than {MAX_ANSWER} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        let answer: Option<Map<String, Value>> = serde_json::from_slice(&body).ok();
        if !status.is_success() {
            let code = answer.as_ref().and_then(|a| a.get("error")).and_then(Value::as_str);
            return Err(match code {
                // RFC 6749 §5.2: 400 (or 401 for invalid_client); a 5xx is the issuer failing.
                Some(code) if status.is_client_error() && REFUSALS.contains(&code) => CredentialError::Refused(code.to_owned()),
                Some(code) => unavailable(format!("HTTP {}, error {}", status.as_u16(), shown_code(code))),
                None => unavailable(format!("HTTP {}", status.as_u16())),
            });
        }
        let answer = answer.ok_or_else(|| unavailable("the answer is not a JSON object".to_owned()))?;
        let issued = check_answer(&answer).map_err(|e| unavailable(e.to_owned()))?;
        let mut header = HeaderValue::from_str(&format!("Bearer {}", issued.0)).map_err(|_| unavailable("access_token is not a token68".to_owned()))?;
        header.set_sensitive(true);
        let ttl = issued.1.map_or(DEFAULT_TTL, |s| Duration::from_secs(s).saturating_sub(EXPIRY_MARGIN)).min(left);
        Ok(Issued { header, ttl })
    }

    /// The scope to ask for: `upstream.auth.scope`, narrowed to the decision's `upstream_scopes`
    /// (or those alone without a configured scope). Narrowed to nothing, there is nothing to ask
    /// for: an empty `scope` would get the issuer's default, never less.
    fn scope_for(&self, narrowed: Option<&[String]>) -> Result<Option<String>, CredentialError> {
        let Some(narrowed) = narrowed else { return Ok(self.scope.clone()) };
        let kept: Vec<&str> = match &self.scope {
            Some(configured) => configured.split(' ').filter(|s| narrowed.iter().any(|n| n == s)).collect(),
            None => narrowed.iter().map(String::as_str).collect(),
        };
        if kept.is_empty() {
            self.metrics.count("refused");
            return Err(CredentialError::Refused("no_upstream_scope".to_owned()));
        }
        Ok(Some(kept.join(" ")))
    }

    /// The token endpoint: configured, or discovered once from the issuer's metadata (a
    /// failed discovery is tried again by the next request).
    async fn endpoint(&self) -> Result<Url, CredentialError> {
        if let Some(u) = &self.configured {
            return Ok(u.clone());
        }
        self.discovered
            .get_or_try_init(|| crate::oauth::discover_token_endpoint(&self.http, &self.issuer))
            .await
            .cloned()
            .map_err(|e| CredentialError::Unavailable(format!("token endpoint: {e}")))
    }
}

/// RFC 8693 §2.2.1: the access token and `expires_in` of a usable answer, or what is wrong.
fn check_answer(answer: &Map<String, Value>) -> Result<(&str, Option<u64>), &'static str> {
    let token = answer.get("access_token").and_then(Value::as_str).filter(|t| !t.is_empty()).ok_or("no access_token")?;
    if answer.get("issued_token_type").and_then(Value::as_str) != Some(ACCESS_TOKEN_TYPE) {
        return Err("issued_token_type is not urn:ietf:params:oauth:token-type:access_token");
    }
    // RFC 6749 §7.1: the type is case-insensitive; N_A or DPoP cannot be sent as a bearer token.
    if !answer.get("token_type").and_then(Value::as_str).is_some_and(|t| t.eq_ignore_ascii_case("bearer")) {
        return Err("token_type is not Bearer");
    }
    let expires_in = match answer.get("expires_in") {
        None => None,
        Some(v) => Some(v.as_u64().ok_or("expires_in is not a whole number of seconds")?),
    };
    Ok((token, expires_in))
}

/// An OAuth error code as logged: RFC 6749 §5.2 limits it to printable ASCII; anything else is
/// not quoted back.
fn shown_code(code: &str) -> &str {
    if code.len() <= 64 && code.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\') {
        code
    } else {
        "(not an RFC 6749 error code)"
    }
}

impl std::fmt::Debug for Exchanger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanger").field("issuer", &self.issuer).field("token_endpoint", &self.configured).finish_non_exhaustive()
    }
}

/// The subject token as the request presents it (`Authorization: Bearer` or `DPoP`): the token
/// stage verified exactly this header's token.
fn subject_of(headers: &http::HeaderMap) -> Result<&str, CredentialError> {
    match portcullis_wire::jose::credentials(headers, true) {
        Ok(Some((_, subject))) => Ok(subject),
        _ => Err(CredentialError::Unavailable("the verified token is no longer in the request".to_owned())),
    }
}

/// Whom a cache entry counts against: the verified user (the token's issuer and `sub`), else
/// the verified agent, as everywhere in decision 13; a token with neither names its issuer.
fn caller_of(token: &VerifiedToken, agent: Option<&str>) -> CallerKey {
    match (token.sub(), agent) {
        (Some(sub), _) => CallerKey::user(token.iss(), sub),
        (None, Some(agent)) => CallerKey::agent(agent),
        (None, None) => CallerKey::user(token.iss(), ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_usable_answer_names_an_access_token_of_type_bearer() {
        let ok = answer(serde_json::json!({"access_token": "t", "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "bEaReR", "expires_in": 300}));
        assert_eq!(check_answer(&ok), Ok(("t", Some(300))));
        let no_expiry = answer(serde_json::json!({"access_token": "t", "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer"}));
        assert_eq!(check_answer(&no_expiry), Ok(("t", None)));
        for (bad, why) in [
            (serde_json::json!({"issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer"}), "no access_token"),
            (serde_json::json!({"access_token": "t", "token_type": "Bearer"}), "issued_token_type is not urn:ietf:params:oauth:token-type:access_token"),
            (serde_json::json!({"access_token": "t", "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "N_A"}), "token_type is not Bearer"),
            (serde_json::json!({"access_token": "t", "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "DPoP"}), "token_type is not Bearer"),
            (
                serde_json::json!({"access_token": "t", "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer", "expires_in": "300"}),
                "expires_in is not a whole number of seconds",
            ),
        ] {
            assert_eq!(check_answer(&answer(bad)), Err(why));
        }
    }

    #[test]
    fn error_codes_are_quoted_only_when_they_are_codes() {
        assert_eq!(shown_code("invalid_client"), "invalid_client");
        assert_eq!(shown_code("bad\"code"), "(not an RFC 6749 error code)");
        assert_eq!(shown_code(&"x".repeat(65)), "(not an RFC 6749 error code)");
    }
}
