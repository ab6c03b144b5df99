//! `kind = "token_exchange"`: RFC 8693 token exchange at the user's issuer, cached.
//!
//! The subject token is the request's verified access token; the answer is checked (RFC 8693
//! §2.2.1: `access_token`, `issued_token_type`, `token_type`) before the backend gets it. The
//! token endpoint is trusted like the issuer (`oauth.issuer_ca`, https only, no redirects:
//! `tls::outbound_client`). Issued tokens live only in this cache, as sensitive header values;
//! they are never logged.

use std::borrow::Cow;
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
use super::issued::{IssuedTokens, Turn, Wanted};
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

/// An issued token as the backend gets it (`Bearer <token>`, sensitive), and how long to keep it.
struct Issued {
    header: HeaderValue,
    ttl: Duration,
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
    /// The issued tokens kept, and the exchanges in flight.
    tokens: IssuedTokens,
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
            tokens: IssuedTokens::new(MAX_ENTRIES, cfg.max_cached_per_caller),
            metrics: ExchangeMetrics::default(),
        })
    }

    /// Drops the cached token whose header is `header` (the backend refused it).
    pub(super) fn forget(&self, header: &HeaderValue) {
        self.tokens.forget(header);
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
        // The token stage hashed this very token for its own cache: a hit needs nothing more of
        // the request (the header is read again, and the token sent, only to exchange it).
        let digest: [u8; 32] = match token.digest() {
            Some(d) => *d,
            None => Sha256::digest(subject_of(headers)?.as_bytes()).into(),
        };
        let wanted = Wanted { digest, agent, scope: scope.as_deref(), caller: caller_of(token, agent) };
        loop {
            if let Some(hit) = self.tokens.get(&wanted, now) {
                self.metrics.count("cached");
                return Ok((hit, true));
            }
            let flight = match self.tokens.turn(&wanted).await {
                Turn::Exchange(flight) => flight,
                // Another call's exchange, issued for both.
                Turn::Waited(Some(outcome)) => return self.counted(outcome.map(|header| (header, true))),
                // That call went away before its exchange was done: ask again.
                Turn::Waited(None) => continue,
            };
            // Kept by a call whose exchange landed between the lookup and the turn.
            if let Some(hit) = self.tokens.get(&wanted, now) {
                flight.land(&Ok(hit.clone()));
                self.metrics.count("cached");
                return Ok((hit, true));
            }
            // Never past the subject token's own expiry.
            let left = Duration::from_secs(token.exp().saturating_sub(now.secs()));
            let outcome = match subject_of(headers) {
                Ok(subject) => self.exchange(subject, agent, scope.as_deref(), now, left).await,
                Err(e) => Err(e),
            };
            // A caller holding its share of the cache (or a token that expires at once) still
            // gets its credential, exchanged for this call and not kept: the issuer stays behind
            // `max_per_second`, the others keep theirs.
            let outcome = outcome.map(|issued| {
                self.tokens.keep(&wanted, issued.header.clone(), issued.ttl, now);
                issued.header
            });
            flight.land(&outcome);
            return self.counted(outcome.map(|header| (header, false)));
        }
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
    fn scope_for(&self, narrowed: Option<&[String]>) -> Result<Option<Cow<'_, str>>, CredentialError> {
        let Some(narrowed) = narrowed else { return Ok(self.scope.as_deref().map(Cow::Borrowed)) };
        let kept: Vec<&str> = match &self.scope {
            Some(configured) => configured.split(' ').filter(|s| narrowed.iter().any(|n| n == s)).collect(),
            None => narrowed.iter().map(String::as_str).collect(),
        };
        if kept.is_empty() {
            self.metrics.count("refused");
            return Err(CredentialError::Refused("no_upstream_scope".to_owned()));
        }
        Ok(Some(Cow::Owned(kept.join(" "))))
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
fn caller_of(token: &VerifiedToken, agent: Option<&str>) -> u128 {
    match (token.user_key(), agent) {
        (Some(user), _) => user.short(),
        (None, Some(agent)) => CallerKey::agent(agent).short(),
        (None, None) => CallerKey::user(token.iss(), "").short(),
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
