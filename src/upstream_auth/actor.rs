//! `actor = true`: the actor token (RFC 8693 §2.1 `actor_token`) the gateway signs for each
//! exchange, naming the verified agent, so the issued token can say who acted for whom
//! (`act`, RFC 8693 §4.1). A JWT (`typ` `JWT`, EdDSA) with `iss` = the gateway's public origin,
//! `sub` = the agent, `aud` = the issuer identifier (never the token endpoint URL), the gateway's
//! `client_id`, `iat`, `exp` 60 s later, a random `jti`; `kid` is the key's RFC 7638
//! thumbprint. The public keys are published at [`JWKS_PATH`] for the issuer to trust.
//!
//! Signing is jsonwebtoken's (aws-lc); the key file is read with the agent library's loader.

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

/// The actor key and what it signs with.
pub(super) struct ActorSigner {
    key: EncodingKey,
    kid: String,
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
        let load = |field: &str, path: &std::path::Path| {
            portcullis_client::keys::load_private_jwk(path)
                .map_err(|e| FieldError::new(field, format!("{e} (an Ed25519 private JWK, as `portcullis keygen` writes)")))
        };
        let current = load("upstream.auth.actor_key_file", &keys.current)?;
        let der = current.to_pkcs8_der().map_err(|e| FieldError::new("upstream.auth.actor_key_file", format!("cannot encode the key: {e}")))?;
        let mut published = vec![public_jwk(&current.verifying_key())];
        if let Some(p) = &keys.previous {
            let previous = load("upstream.auth.actor_key_previous_file", p)?;
            published.push(public_jwk(&previous.verifying_key()));
        }
        Ok(ActorSigner {
            key: EncodingKey::from_ed_der(der.as_bytes()),
            kid: ed25519_thumbprint(&current.verifying_key()),
            origin,
            issuer,
            client_id,
            jwks: serde_json::json!({ "keys": published }).to_string(),
        })
    }

    /// An actor token for `agent`, issued at `now`.
    pub(super) fn token(&self, agent: &str, now: UnixTime) -> Result<String, String> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some("JWT".to_owned());
        header.kid = Some(self.kid.clone());
        let iat = now.secs();
        let claims = serde_json::json!({
            "iss": self.origin, "sub": agent, "aud": self.issuer, "client_id": self.client_id,
            "iat": iat, "exp": iat + LIFETIME_SECS, "jti": uuid::Uuid::new_v4().to_string(),
        });
        jsonwebtoken::encode(&header, &claims, &self.key).map_err(|e| format!("cannot sign the actor token: {e}"))
    }

    /// The JWK Set served at [`JWKS_PATH`].
    pub(super) fn jwks(&self) -> &str {
        &self.jwks
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
