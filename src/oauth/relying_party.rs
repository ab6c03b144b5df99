//! The gateway as an OpenID Connect relying party at `oauth.issuer`, for the approval page
//! (docs/approvals.md): discovery of the authorization and token endpoints, the authorization
//! code exchange, and ID token validation (OIDC Core §3.1.3.7) on the same JOSE and JWKS code
//! that verifies access tokens: signature with the issuer's keys, `iss`, `aud` (our client
//! id), `azp`, `exp`, `nonce`, `auth_time`.

use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};
use tokio::sync::OnceCell;
use url::Url;

use super::issuer::IssuerClient;
use super::jwks::{Jwks, Refetch};
use super::{token, TokenError};
use crate::config::{self, FieldError};
use crate::telemetry::TokenMetrics;
use crate::tls;
use portcullis_wire::UnixTime;

/// The issuer's login endpoints, from its metadata.
#[derive(Debug, Clone)]
pub(crate) struct Endpoints {
    /// `authorization_endpoint` (https).
    pub authorization: Url,
    /// `token_endpoint` (https).
    pub token: Url,
}

/// Who logged in, from a validated ID token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Login {
    /// `iss`.
    pub iss: String,
    /// `sub`.
    pub sub: String,
    /// `auth_time`, when the issuer sent it.
    pub auth_time: Option<u64>,
}

/// The relying party for one issuer and client.
pub(crate) struct RelyingParty {
    client: IssuerClient,
    jwks: Jwks,
    client_id: String,
    client_secret: Option<SecretString>,
    skew_secs: u64,
    endpoints: OnceCell<Endpoints>,
}

impl std::fmt::Debug for RelyingParty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelyingParty").field("issuer", &self.client.issuer).field("client_id", &self.client_id).finish_non_exhaustive()
    }
}

impl RelyingParty {
    /// Built from `[oauth]` (issuer, trust root, timeouts) and the client registration.
    pub(crate) fn new(cfg: &config::OAuth, client_id: &str, client_secret: Option<SecretString>) -> Result<RelyingParty, FieldError> {
        let issuer = cfg.issuer.clone().ok_or_else(|| FieldError::new("oauth.issuer", "required for approval logins"))?;
        let http = tls::outbound_client("oauth.issuer_ca", cfg.issuer_ca.as_deref(), cfg.fetch_timeout)
            .map_err(|e| FieldError::new("oauth.issuer_ca", e.to_string()))?;
        let client = IssuerClient::new(http, issuer);
        let jwks = Jwks::new(client.clone(), cfg.jwks_url.clone(), Refetch::new(cfg.jwks_refetch_interval, cfg.jwks_refetch_budget), TokenMetrics::default());
        Ok(RelyingParty { client, jwks, client_id: client_id.to_owned(), client_secret, skew_secs: cfg.clock_skew.as_secs(), endpoints: OnceCell::new() })
    }

    /// The issuer identifier (`oauth.issuer`).
    pub(crate) fn issuer(&self) -> &str {
        &self.client.issuer
    }

    /// The client id.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The authorization and token endpoints from the issuer's metadata (fetched once; a
    /// failure is retried on the next login).
    pub(crate) async fn endpoints(&self) -> Result<Endpoints, TokenError> {
        self.endpoints.get_or_try_init(|| self.discover()).await.cloned()
    }

    async fn discover(&self) -> Result<Endpoints, TokenError> {
        let md = self.client.metadata().await?;
        Ok(Endpoints { authorization: md.endpoint(&self.client, "authorization_endpoint")?, token: md.endpoint(&self.client, "token_endpoint")? })
    }

    /// Redeems an authorization code (RFC 6749 §4.1.3 with the PKCE verifier, RFC 7636 §4.5)
    /// and validates the ID token it returns against `nonce`.
    pub(crate) async fn redeem(&self, code: &str, verifier: &str, redirect_uri: &str, nonce: &str, now: UnixTime) -> Result<Login, TokenError> {
        let endpoints = self.endpoints().await?;
        let mut form = vec![("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirect_uri), ("code_verifier", verifier)];
        let fetched = match &self.client_secret {
            Some(secret) => self.client.post_form(&endpoints.token, &self.client_id, secret.expose_secret(), &form).await,
            None => {
                form.push(("client_id", &self.client_id));
                self.client.post_form_public(&endpoints.token, &form).await
            }
        };
        let body = fetched.map_err(|e| self.client.unavailable("token endpoint", e.reason().to_owned()))?.body;
        let answer: Map<String, Value> = serde_json::from_slice(&body).map_err(|e| self.client.unavailable("token endpoint", e.to_string()))?;
        let id_token = answer.get("id_token").and_then(Value::as_str).ok_or(TokenError::MissingClaim { claim: "id_token" })?;
        self.validate(id_token, nonce, now).await
    }

    /// OIDC Core §3.1.3.7 steps 2–11 and 13's input: signature with the issuer's keys (never
    /// `none` or a MAC), `iss`, `aud`, `azp`, `exp`, `nonce`; `auth_time` is returned.
    pub(crate) async fn validate(&self, id_token: &str, nonce: &str, now: UnixTime) -> Result<Login, TokenError> {
        let jwt = token::decode_id_token(id_token)?;
        let keys = self.jwks.keys_for(jwt.kid.as_deref(), jwt.alg, now).await?;
        if !keys.iter().any(|k| token::verify_signature(&jwt, k).is_ok()) {
            return Err(TokenError::BadSignature);
        }
        let claims = jwt.into_claims();
        let text = |name: &'static str| -> Result<&str, TokenError> {
            match claims.get(name) {
                Some(Value::String(s)) => Ok(s),
                Some(_) => Err(TokenError::InvalidClaim { claim: name }),
                None => Err(TokenError::MissingClaim { claim: name }),
            }
        };
        if text("iss")? != self.client.issuer {
            return Err(TokenError::WrongIssuer);
        }
        let aud: Vec<&str> = match claims.get("aud") {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => return Err(TokenError::MissingClaim { claim: "aud" }),
        };
        // Step 3: our client id, and no audience we do not know.
        if !aud.contains(&self.client_id.as_str()) || aud.len() > 1 && claims.get("azp").and_then(Value::as_str) != Some(self.client_id.as_str()) {
            return Err(TokenError::WrongAudience { audience: self.client_id.clone() });
        }
        if let Some(azp) = claims.get("azp") {
            if azp.as_str() != Some(self.client_id.as_str()) {
                return Err(TokenError::WrongAudience { audience: self.client_id.clone() });
            }
        }
        let exp = claims.get("exp").and_then(Value::as_u64).ok_or(TokenError::MissingClaim { claim: "exp" })?;
        if now.secs() > exp.saturating_add(self.skew_secs) {
            return Err(TokenError::Expired { exp });
        }
        // Step 11: the nonce this browser's login sent (constant-time: it is a secret until used).
        let sent = text("nonce")?;
        if !constant_time_eq(sent.as_bytes(), nonce.as_bytes()) {
            return Err(TokenError::InvalidClaim { claim: "nonce" });
        }
        let sub = text("sub")?.to_owned();
        let auth_time = match claims.get("auth_time") {
            None => None,
            Some(v) => Some(v.as_u64().ok_or(TokenError::InvalidClaim { claim: "auth_time" })?),
        };
        Ok(Login { iss: self.client.issuer.clone(), sub, auth_time })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok()
}
