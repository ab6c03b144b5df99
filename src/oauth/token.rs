//! JWT access tokens (RFC 9068), pipeline stage 7: the signature check against one issuer
//! key and the claim checks (`iss`, `aud`, `exp`, `nbf`, `iat`, scopes), after `compact` read
//! the token's shape and applied the header rules.
//!
//! Pure functions: no I/O, and time is the request's `now` (never the clock). The key comes
//! from `jwks`; this module trusts only that key and the configured issuer and audience.
//! Introspection responses (RFC 7662) go through the same claim checks with
//! [`Profile::Introspection`].

use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};

use super::jwks::{key_kind, PublicKey};
use super::{short, TokenError, VerifiedToken};
use portcullis_wire::jose::{self, Alg};
use portcullis_wire::UnixTime;

/// What a token is checked against, built once from `[oauth]`.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    /// The configured issuer; `iss` must be identical (RFC 9068 §4).
    pub(crate) issuer: String,
    /// The resource; `aud` must contain it (RFC 8707 §2, RFC 9068 §4).
    pub(crate) audience: String,
    /// Tolerated clock difference, in seconds.
    pub(crate) skew_secs: u64,
}

/// Which claims a source must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profile {
    /// A JWT access token: `iss`, `sub`, `aud`, `exp`, `iat` required (RFC 9068 §2.2).
    Jwt,
    /// An RFC 7662 response: `aud` and `exp` required; `iss`, when present, must match.
    Introspection,
}

/// A decoded, not yet verified JWT.
#[derive(Debug)]
pub(crate) struct Jwt<'a> {
    /// The accepted signature algorithm.
    pub(crate) alg: Algorithm,
    /// The key id, if the header names one.
    pub(crate) kid: Option<String>,
    signing_input: &'a str,
    signature: &'a str,
    claims: Map<String, Value>,
}

impl Jwt<'_> {
    /// The claims, to be believed only after [`verify_signature`] passed.
    pub(crate) fn into_claims(self) -> Map<String, Value> {
        self.claims
    }
}

/// Decodes the header and claims and applies the header rules (`jose::decode`). Nothing
/// here trusts the token: the signature is checked by [`verify_signature`] before the claims
/// are believed.
pub(crate) fn decode(token: &str) -> Result<Jwt<'_>, TokenError> {
    jwt_of(jose::decode(token)?)
}

/// [`decode`] for an OpenID Connect ID token (`typ` absent or `JWT`).
pub(crate) fn decode_id_token(token: &str) -> Result<Jwt<'_>, TokenError> {
    jwt_of(jose::decode_id_token(token)?)
}

fn jwt_of(jws: jose::Jws<'_>) -> Result<Jwt<'_>, TokenError> {
    let alg = match jws.alg {
        Alg::Rs256 => Algorithm::RS256,
        Alg::Ps256 => Algorithm::PS256,
        Alg::Es256 => Algorithm::ES256,
        Alg::EdDsa => Algorithm::EdDSA,
    };
    Ok(Jwt { alg, kid: jws.kid, signing_input: jws.signing_input, signature: jws.signature, claims: jws.claims })
}

/// Checks the signature with `key`, which must be of the kind `jwt.alg` needs (the caller
/// picked it by `kid` and kind; a JWK `alg`, when present, must name the same algorithm).
pub(crate) fn verify_signature(jwt: &Jwt<'_>, key: &PublicKey) -> Result<(), TokenError> {
    if key_kind(jwt.alg) != Some(key.kind) || key.alg.is_some_and(|a| a != jwt.alg) {
        return Err(TokenError::KeyMismatch { kid: short(key.kid.as_deref().unwrap_or("")), alg: format!("{:?}", jwt.alg) });
    }
    match jsonwebtoken::crypto::verify(jwt.signature, jwt.signing_input.as_bytes(), &key.key, jwt.alg) {
        Ok(true) => Ok(()),
        Ok(false) | Err(_) => Err(TokenError::BadSignature),
    }
}

/// The claim checks, after the signature passed.
pub(crate) fn validate_jwt(jwt: Jwt<'_>, rules: &Rules, now: UnixTime) -> Result<VerifiedToken, TokenError> {
    validate_claims(jwt.claims, rules, now, Profile::Jwt)
}

/// Checks `iss`, `aud`, the time window and reads the identity and scopes.
pub(crate) fn validate_claims(claims: Map<String, Value>, rules: &Rules, now: UnixTime, profile: Profile) -> Result<VerifiedToken, TokenError> {
    match (string_claim(&claims, "iss")?, profile) {
        (Some(iss), _) if iss != rules.issuer => return Err(TokenError::WrongIssuer),
        (None, Profile::Jwt) => return Err(TokenError::MissingClaim { claim: "iss" }),
        _ => {}
    }
    let aud = audiences(&claims)?;
    // RFC 8707 §2 / RFC 9068 §4: a token minted for another resource is refused. An empty
    // audience here means each request names its own (`[[servers]]`: `TokenVerifier::check_for`).
    if !rules.audience.is_empty() && !aud.contains(&rules.audience) {
        return Err(TokenError::WrongAudience { audience: short(&rules.audience) });
    }
    let exp = time_claim(&claims, "exp")?.ok_or(TokenError::MissingClaim { claim: "exp" })?;
    let nbf = time_claim(&claims, "nbf")?;
    let iat = time_claim(&claims, "iat")?;
    if profile == Profile::Jwt && iat.is_none() {
        return Err(TokenError::MissingClaim { claim: "iat" });
    }
    let sub = string_claim(&claims, "sub")?.map(str::to_owned);
    if profile == Profile::Jwt && sub.is_none() {
        return Err(TokenError::MissingClaim { claim: "sub" });
    }
    // RFC 9068 §2.2 names `client_id`; some issuers still send OIDC's `azp`.
    let client_id = match string_claim(&claims, "client_id")? {
        Some(c) => Some(c.to_owned()),
        None => string_claim(&claims, "azp")?.map(str::to_owned),
    };
    let jkt = confirmation(&claims)?;
    let token = VerifiedToken::new(rules.issuer.clone(), sub, aud, scopes(&claims)?, claims, client_id, exp, nbf, iat, jkt);
    token.check_time(now, rules.skew_secs)?;
    Ok(token)
}

/// `cnf.jkt` (RFC 7800 §3.1, RFC 9449 §6.1): `Some` for a DPoP-bound token. A `cnf` that binds
/// the token some other way is refused: ignoring it would make a bound token a bearer token.
fn confirmation(claims: &Map<String, Value>) -> Result<Option<String>, TokenError> {
    let cnf = match claims.get("cnf") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(cnf)) => cnf,
        Some(_) => return Err(TokenError::InvalidClaim { claim: "cnf" }),
    };
    match cnf.get("jkt") {
        // A SHA-256 thumbprint is 32 bytes: 43 base64url characters.
        Some(Value::String(jkt)) if jkt.len() == 43 && jkt.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') => Ok(Some(jkt.clone())),
        Some(_) => Err(TokenError::InvalidClaim { claim: "cnf" }),
        None => Err(TokenError::UnsupportedConfirmation),
    }
}

fn string_claim<'a>(claims: &'a Map<String, Value>, name: &'static str) -> Result<Option<&'a str>, TokenError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(TokenError::InvalidClaim { claim: name }),
    }
}

/// `aud` is a string or an array of strings (RFC 7519 §4.1.3).
fn audiences(claims: &Map<String, Value>) -> Result<Vec<String>, TokenError> {
    match claims.get("aud") {
        None | Some(Value::Null) => Err(TokenError::MissingClaim { claim: "aud" }),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items.iter().map(|v| v.as_str().map(str::to_owned).ok_or(TokenError::InvalidClaim { claim: "aud" })).collect(),
        Some(_) => Err(TokenError::InvalidClaim { claim: "aud" }),
    }
}

/// A NumericDate (RFC 7519 §2): seconds, possibly fractional; negative is invalid.
fn time_claim(claims: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, TokenError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => Ok(Some(u)),
            (None, Some(f)) if f >= 0.0 && f.is_finite() => Ok(Some(f.floor() as u64)),
            _ => Err(TokenError::InvalidClaim { claim: name }),
        },
        Some(_) => Err(TokenError::InvalidClaim { claim: name }),
    }
}

/// Scopes from `scope` (space-separated, RFC 9068 §2.2.3) and/or `scp` (array or string, as
/// some issuers send), in order, without duplicates.
fn scopes(claims: &Map<String, Value>) -> Result<Vec<String>, TokenError> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: &str| {
        for part in s.split_ascii_whitespace() {
            if !out.iter().any(|o| o == part) {
                out.push(part.to_owned());
            }
        }
    };
    match claims.get("scope") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => add(s),
        Some(_) => return Err(TokenError::InvalidClaim { claim: "scope" }),
    }
    match claims.get("scp") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => add(s),
        Some(Value::Array(items)) => {
            for item in items {
                add(item.as_str().ok_or(TokenError::InvalidClaim { claim: "scp" })?);
            }
        }
        Some(_) => return Err(TokenError::InvalidClaim { claim: "scp" }),
    }
    Ok(out)
}

#[cfg(test)]
#[path = "token_tests.rs"]
mod tests;
