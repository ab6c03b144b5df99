//! Issuer signing keys made at run time (RSA 2048, EC P-256, Ed25519 via aws-lc-rs) and JWT
//! minting with jsonwebtoken's encoder. Used by the [`issuer`](crate::issuer), the gateway's
//! integration and unit tests (`src/oauth`), the token bench and the demo.

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{EcdsaKeyPair, Ed25519KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::Value;

use crate::Error;

/// A private signing key with its public JWK.
#[derive(Clone)]
pub struct SigningKey {
    /// The algorithm tokens are signed with.
    pub alg: Algorithm,
    /// The key id in tokens' headers and in the JWK.
    pub kid: String,
    /// The private key.
    pub encoding: EncodingKey,
    /// The public JWK with `kid`, `alg` and `use`.
    pub jwk: Value,
}

impl SigningKey {
    /// RSA 2048 for RS256 (or PS256 with [`SigningKey::with_alg`]).
    pub fn rsa(kid: &str) -> SigningKey {
        SigningKey::try_rsa(kid).expect("RSA key")
    }

    /// EC P-256 for ES256.
    pub fn ec(kid: &str) -> SigningKey {
        SigningKey::try_ec(kid).expect("EC key")
    }

    /// Ed25519 for EdDSA.
    pub fn ed(kid: &str) -> SigningKey {
        SigningKey::try_ed(kid).expect("Ed25519 key")
    }

    /// [`SigningKey::rsa`], or why not.
    pub fn try_rsa(kid: &str) -> Result<SigningKey, Error> {
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).map_err(key_err)?;
        let der = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&pair).map_err(key_err)?;
        let pem = pem("PRIVATE KEY", der.as_ref());
        SigningKey::new(Algorithm::RS256, kid, EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(key_err)?)
    }

    /// [`SigningKey::ec`], or why not.
    pub fn try_ec(kid: &str) -> Result<SigningKey, Error> {
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new()).map_err(key_err)?;
        SigningKey::new(Algorithm::ES256, kid, EncodingKey::from_ec_der(doc.as_ref()))
    }

    /// [`SigningKey::ed`], or why not.
    pub fn try_ed(kid: &str) -> Result<SigningKey, Error> {
        let doc = Ed25519KeyPair::generate_pkcs8v1(&SystemRandom::new()).map_err(key_err)?;
        SigningKey::new(Algorithm::EdDSA, kid, EncodingKey::from_ed_der(doc.as_ref()))
    }

    fn new(alg: Algorithm, kid: &str, encoding: EncodingKey) -> Result<SigningKey, Error> {
        let jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&encoding, alg).map_err(key_err)?;
        let mut jwk = serde_json::to_value(jwk).map_err(key_err)?;
        jwk["kid"] = Value::from(kid);
        jwk["use"] = Value::from("sig");
        Ok(SigningKey { alg, kid: kid.to_owned(), encoding, jwk })
    }

    /// The same key used with another algorithm of its family (RS256 -> PS256).
    pub fn with_alg(mut self, alg: Algorithm) -> SigningKey {
        self.alg = alg;
        self.jwk["alg"] = serde_json::to_value(alg).unwrap();
        self
    }

    /// The same key published under another kid.
    pub fn with_kid(mut self, kid: &str) -> SigningKey {
        self.kid = kid.to_owned();
        self.jwk["kid"] = Value::from(kid);
        self
    }

    /// An RFC 9068 token (`typ: at+jwt`, this key's `kid`) with `claims`.
    pub fn sign(&self, claims: &Value) -> String {
        self.try_sign(claims).expect("signed token")
    }

    /// [`SigningKey::sign`], or why not.
    pub fn try_sign(&self, claims: &Value) -> Result<String, Error> {
        let mut h = Header::new(self.alg);
        h.typ = Some("at+jwt".into());
        h.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&h, claims, &self.encoding).map_err(key_err)
    }

    /// A token with a header of the caller's choosing.
    pub fn sign_with(&self, header: &Header, claims: &Value) -> String {
        jsonwebtoken::encode(header, claims, &self.encoding).unwrap()
    }

    /// A DPoP proof (RFC 9449 §4.2) for `htm htu` presenting `access_token`, made by
    /// jsonwebtoken with this key (`typ: dpop+jwt`, the public JWK in the header): proofs from
    /// an implementation that is not the gateway's. `jti` is a random UUID.
    pub fn dpop_proof(&self, htm: &str, htu: &str, access_token: &str, iat: u64) -> String {
        let claims = serde_json::json!({
            "jti": uuid::Uuid::new_v4().to_string(),
            "htm": htm,
            "htu": htu,
            "iat": iat,
            "ath": ath(access_token),
        });
        self.dpop_proof_with(&self.dpop_header(), &claims)
    }

    /// The header of [`SigningKey::dpop_proof`], to change before [`SigningKey::dpop_proof_with`].
    pub fn dpop_header(&self) -> Header {
        let mut h = Header::new(self.alg);
        h.typ = Some("dpop+jwt".into());
        h.jwk = Some(jsonwebtoken::jwk::Jwk::from_encoding_key(&self.encoding, self.alg).expect("public JWK"));
        h
    }

    /// A proof with this header and these claims, signed with this key.
    pub fn dpop_proof_with(&self, header: &Header, claims: &Value) -> String {
        jsonwebtoken::encode(header, claims, &self.encoding).expect("signed proof")
    }

    /// The RFC 7638 SHA-256 thumbprint of this key, by jsonwebtoken: the `cnf.jkt` of tokens
    /// bound to it.
    pub fn thumbprint(&self) -> String {
        let jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&self.encoding, self.alg).expect("public JWK");
        jwk.thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256).expect("thumbprint")
    }
}

/// A JWK Set document of `keys`.
pub fn jwks(keys: &[&SigningKey]) -> Value {
    serde_json::json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() })
}

/// An unsigned token (`alg: none`, empty signature; RFC 7519 §6).
pub fn unsigned(kid: &str, claims: &Value) -> String {
    let h = serde_json::json!({"alg": "none", "typ": "at+jwt", "kid": kid});
    format!("{}.{}.", b64(h.to_string().as_bytes()), b64(claims.to_string().as_bytes()))
}

/// An HS256 token whose HMAC secret is `secret` (the algorithm-confusion attack uses the
/// issuer's public key as the secret).
pub fn hmac(kid: &str, secret: &[u8], claims: &Value) -> String {
    let mut h = Header::new(Algorithm::HS256);
    h.typ = Some("at+jwt".into());
    h.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&h, claims, &EncodingKey::from_secret(secret).unwrap()).unwrap()
}

/// `ath` for `token`: base64url(SHA-256(token)) (RFC 9449 §4.2), by aws-lc-rs.
pub fn ath(token: &str) -> String {
    b64(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes()).as_ref())
}

/// base64url without padding.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn key_err(e: impl std::fmt::Display) -> Error {
    Error::Key(e.to_string())
}

fn pem(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}
