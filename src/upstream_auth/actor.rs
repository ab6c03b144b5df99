//! `actor = true`: the actor token (RFC 8693 §2.1 `actor_token`) the gateway signs for each
//! exchange, naming the verified agent, so the issued token can say who acted for whom
//! (`act`, RFC 8693 §4.1). A JWT (`typ` `JWT`, EdDSA) with `iss` = the gateway's public origin,
//! `sub` = the agent, `aud` = the issuer identifier (never the token endpoint URL), the gateway's
//! `client_id`, `iat`, `exp` 60 s later, a random `jti`; `kid` is the key's RFC 7638
//! thumbprint. The public keys are published at [`JWKS_PATH`] for the issuer to trust.
//!
//! The same kind of key signs `private_key_jwt` client assertions ([`ClientAssertion`],
//! RFC 7523). Signing is jsonwebtoken's (aws-lc); key files are read with the agent library's
//! loader.

use ed25519_dalek::pkcs8::EncodePrivateKey;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use portcullis_wire::signature::{ed25519_public_jwk, ed25519_thumbprint};
use portcullis_wire::UnixTime;

use crate::config::{ActorKeys, FieldError};

/// Where the gateway publishes its actor keys (public listener).
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

/// Lifetime of an actor token: it is used at once, by the gateway itself.
const LIFETIME_SECS: u64 = 60;

/// `urn:ietf:params:oauth:token-type:jwt` (RFC 8693 §3).
pub(super) const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// An Ed25519 private JWK the gateway signs its own JWTs with (actor tokens, client
/// assertions): the key, its RFC 7638 thumbprint (`kid`) and its public JWK.
pub(super) struct GatewayKey {
    key: EncodingKey,
    kid: String,
    public: serde_json::Value,
}

impl GatewayKey {
    /// Reads the private JWK at `path`; errors name `field`.
    pub(super) fn load(field: &str, path: &std::path::Path) -> Result<GatewayKey, FieldError> {
        let key = portcullis_client::keys::load_private_jwk(path)
            .map_err(|e| FieldError::new(field, format!("{e} (an Ed25519 private JWK, as `portcullis keygen` writes)")))?;
        let der = key.to_pkcs8_der().map_err(|e| FieldError::new(field, format!("cannot encode the key: {e}")))?;
        Ok(GatewayKey {
            key: EncodingKey::from_ed_der(der.as_bytes()),
            kid: ed25519_thumbprint(&key.verifying_key()),
            public: public_jwk(&key.verifying_key()),
        })
    }

    /// A JWT (`typ` `JWT`, EdDSA, this key's `kid`) with `claims`.
    pub(super) fn sign(&self, claims: &serde_json::Value) -> Result<String, String> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some("JWT".to_owned());
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.key).map_err(|e| format!("cannot sign a JWT: {e}"))
    }
}

/// The actor key and what it signs with.
pub(super) struct ActorSigner {
    key: GatewayKey,
    /// The gateway's public origin (`iss`).
    origin: String,
    /// The issuer identifier (`aud`).
    issuer: String,
    client_id: String,
    /// `{"keys": [current, previous]}`, serialized once.
    jwks: String,
}

impl ActorSigner {
    /// Loads `keys`; `origin`, `issuer` and `client_id` go into every token.
    pub(super) fn new(keys: &ActorKeys, origin: String, issuer: String, client_id: String) -> Result<ActorSigner, FieldError> {
        let current = GatewayKey::load("upstream.auth.actor_key_file", &keys.current)?;
        let mut published = vec![current.public.clone()];
        if let Some(p) = &keys.previous {
            published.push(GatewayKey::load("upstream.auth.actor_key_previous_file", p)?.public);
        }
        Ok(ActorSigner { key: current, origin, issuer, client_id, jwks: serde_json::json!({ "keys": published }).to_string() })
    }

    /// An actor token for `agent`, issued at `now`.
    pub(super) fn token(&self, agent: &str, now: UnixTime) -> Result<String, String> {
        let iat = now.secs();
        self.key.sign(&serde_json::json!({
            "iss": self.origin, "sub": agent, "aud": self.issuer, "client_id": self.client_id,
            "iat": iat, "exp": iat + LIFETIME_SECS, "jti": uuid::Uuid::new_v4().to_string(),
        }))
    }

    /// The JWK Set served at [`JWKS_PATH`].
    pub(super) fn jwks(&self) -> &str {
        &self.jwks
    }
}

/// `private_key_jwt` (RFC 7523 §2.2, OpenID Connect Core §9): the client assertion of each
/// exchange, `iss` = `sub` = the client id, `aud` = the issuer identifier, 60 s, a fresh `jti`.
pub(super) struct ClientAssertion {
    key: GatewayKey,
    client_id: String,
    issuer: String,
}

/// RFC 7523 §2.2 `client_assertion_type`.
pub(super) const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

impl ClientAssertion {
    /// Loads the client key at `path` (`upstream.auth.client_key_file`).
    pub(super) fn new(path: &std::path::Path, client_id: String, issuer: String) -> Result<ClientAssertion, FieldError> {
        Ok(ClientAssertion { key: GatewayKey::load("upstream.auth.client_key_file", path)?, client_id, issuer })
    }

    /// An assertion made at `now`.
    pub(super) fn assertion(&self, now: UnixTime) -> Result<String, String> {
        let iat = now.secs();
        self.key.sign(&serde_json::json!({
            "iss": self.client_id, "sub": self.client_id, "aud": self.issuer,
            "iat": iat, "exp": iat + LIFETIME_SECS, "jti": uuid::Uuid::new_v4().to_string(),
        }))
    }
}

fn public_jwk(key: &ed25519_dalek::VerifyingKey) -> serde_json::Value {
    let mut jwk = ed25519_public_jwk(key);
    jwk["alg"] = "EdDSA".into();
    jwk["use"] = "sig".into();
    jwk
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_actor_token_names_the_agent_for_the_issuer_and_verifies_with_the_published_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let path = dir.path().join("actor.jwk");
        std::fs::write(&path, portcullis_client::keys::private_jwk(&key).to_string()).unwrap();
        let signer =
            ActorSigner::new(&ActorKeys { current: path, previous: None }, "https://gw.example".into(), "https://issuer.example".into(), "portcullis".into())
                .unwrap();
        let now = UnixTime::now();
        let token = signer.token("https://agent.example", now).unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!((header.typ.as_deref(), header.kid.as_deref()), (Some("JWT"), Some(ed25519_thumbprint(&key.verifying_key()).as_str())));
        let jwks: serde_json::Value = serde_json::from_str(signer.jwks()).unwrap();
        assert!(jwks["keys"][0].get("d").is_none(), "only the public half is published");
        let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(jwks["keys"][0].clone()).unwrap();
        let mut v = jsonwebtoken::Validation::new(Algorithm::EdDSA);
        v.set_audience(&["https://issuer.example"]);
        let claims = jsonwebtoken::decode::<serde_json::Value>(&token, &jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap(), &v).unwrap().claims;
        assert_eq!(
            (claims["iss"].as_str(), claims["sub"].as_str(), claims["client_id"].as_str()),
            (Some("https://gw.example"), Some("https://agent.example"), Some("portcullis"))
        );
        assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 60);
        assert_ne!(signer.token("https://agent.example", now).unwrap(), token, "a fresh jti each time");
    }

    #[test]
    fn an_unreadable_actor_key_names_its_key() {
        let err = ActorSigner::new(&ActorKeys { current: "/nonexistent/actor.jwk".into(), previous: None }, "o".into(), "i".into(), "c".into()).err().unwrap();
        assert_eq!(err.field, "upstream.auth.actor_key_file");
    }
}
