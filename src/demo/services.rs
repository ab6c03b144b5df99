//! The demo's two HTTPS services are the `portcullis-demo` crate's: the agent's key directory
//! ([`KeyDirectory`], Web Bot Auth) and an OAuth authorization server ([`Issuer`], RFC 8414
//! metadata and a JWKS), the same ones the integration tests run against. What is the demo's
//! own is the token it mints: EdDSA access tokens (RFC 9068) for the demo user with the scopes
//! every shipped policy asks for.

use portcullis_demo::issuer::unix_now;
pub use portcullis_demo::{directory::KeyDirectory, issuer::Issuer, Error as ServiceError};
use serde_json::json;

/// The user the demo's tokens speak for.
pub(crate) const DEMO_USER: &str = "demo-user";
/// Scopes the demo's tokens grant: every shipped policy's requirement.
pub(crate) const DEMO_SCOPES: &str = "tools:read tools:write payments:write";

/// An access token (`typ` at+jwt, EdDSA, the issuer's Ed25519 key) for `sub` with
/// [`DEMO_SCOPES`], valid for `lifetime_secs`, whose audience is `audience`.
pub(crate) fn mint(issuer: &Issuer, audience: &str, sub: &str, lifetime_secs: u64) -> Result<String, ServiceError> {
    issuer.ed.try_sign(&claims(issuer, audience, sub, lifetime_secs))
}

/// [`mint`], bound to the key whose RFC 7638 thumbprint is `jkt` (`cnf.jkt`, RFC 9449 §6.1):
/// the gateway accepts it only with a DPoP proof made by that key.
pub(crate) fn mint_bound(issuer: &Issuer, audience: &str, sub: &str, lifetime_secs: u64, jkt: &str) -> Result<String, ServiceError> {
    let mut claims = claims(issuer, audience, sub, lifetime_secs);
    claims["cnf"] = json!({"jkt": jkt});
    issuer.ed.try_sign(&claims)
}

fn claims(issuer: &Issuer, audience: &str, sub: &str, lifetime_secs: u64) -> serde_json::Value {
    let now = unix_now();
    json!({"iss": issuer.url(), "sub": sub, "aud": [audience], "iat": now, "nbf": now, "exp": now + lifetime_secs,
           "client_id": "portcullis-demo-agent", "jti": uuid::Uuid::new_v4().to_string(), "scope": DEMO_SCOPES})
}
