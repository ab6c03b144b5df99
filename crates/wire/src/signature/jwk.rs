//! JSON Web Keys for signature verification: RFC 7638 thumbprints and Ed25519 public JWKs.
//!
//! Web Bot Auth identifies a key by its RFC 7638 SHA-256 thumbprint (`keyid`), computed over the
//! required members only (RFC 8037 App. A.3 for OKP). We always compute the thumbprint ourselves
//! and never trust a directory's `kid` (tests/vectors/jwk-thumbprint.json: the draft's own example has a
//! wrong `kid`). The only key type the gateway verifies with is OKP/Ed25519 (pipeline stage 5);
//! thumbprints are also computed for RSA and EC so every vector can be checked.
//!
//! Trusts nothing: every member is checked for type and length before use.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use ed25519_dalek::VerifyingKey;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// base64url for JWK members: written without padding, read with or without it (RFC 7515 §2
/// says no padding; some publishers add it anyway and the bytes are unambiguous).
const B64URL: GeneralPurpose =
    GeneralPurpose::new(&URL_SAFE, GeneralPurposeConfig::new().with_encode_padding(false).with_decode_padding_mode(DecodePaddingMode::Indifferent));

/// Why a JWK cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    /// The JWK is not a JSON object.
    #[error("JWK is not a JSON object")]
    NotAnObject,
    /// A required member is absent or not a string.
    #[error("JWK member \"{0}\" is missing or not a string")]
    MissingMember(&'static str),
    /// `kty` is not one we can thumbprint (OKP, RSA, EC) or not OKP where a verifying key is needed.
    #[error("JWK kty \"{0}\" is not supported")]
    UnsupportedKeyType(String),
    /// `crv` is not Ed25519 where a verifying key is needed.
    #[error("JWK crv \"{0}\" is not supported (only Ed25519)")]
    UnsupportedCurve(String),
    /// `x` is not base64url of a valid 32-byte Ed25519 point.
    #[error("JWK x is not a valid Ed25519 public key: {0}")]
    InvalidKey(String),
    /// The JWK carries the private scalar `d`; a public key directory must never publish it.
    #[error("JWK contains private key material (d)")]
    PrivateKeyMaterial,
    /// `alg` is present and names something other than Ed25519.
    #[error("JWK alg \"{0}\" does not match an Ed25519 key")]
    AlgorithmMismatch(String),
    /// `use` is present and is not `sig`.
    #[error("JWK use \"{0}\" is not \"sig\"")]
    NotForSignatures(String),
}

/// The RFC 7638 SHA-256 thumbprint of `jwk`, base64url without padding: the `keyid` Web Bot
/// Auth signatures carry. Supports OKP (RFC 8037 App. A.3), RSA and EC (RFC 7638 §3.2).
pub fn jwk_thumbprint(jwk: &Value) -> Result<String, JwkError> {
    let obj = jwk.as_object().ok_or(JwkError::NotAnObject)?;
    let kty = member(obj, "kty")?;
    // RFC 7638 §3.2: required members only, lexicographic order, no whitespace.
    let names: &[&'static str] = match kty {
        "OKP" => &["crv", "kty", "x"],
        "RSA" => &["e", "kty", "n"],
        "EC" => &["crv", "kty", "x", "y"],
        other => return Err(JwkError::UnsupportedKeyType(other.to_owned())),
    };
    let mut canonical = serde_json::Map::new();
    for name in names {
        canonical.insert((*name).to_owned(), Value::String(member(obj, name)?.to_owned()));
    }
    // `names` is already sorted, so the output is sorted whether or not serde_json's
    // `preserve_order` feature is on; values are JSON strings escaped as RFC 7638 §3.3 expects.
    let json = serde_json::to_string(&Value::Object(canonical)).map_err(|e| JwkError::InvalidKey(e.to_string()))?;
    Ok(B64URL.encode(Sha256::digest(json.as_bytes())))
}

/// The thumbprint of an Ed25519 public key (the `keyid` of a key we hold).
pub fn ed25519_thumbprint(key: &VerifyingKey) -> String {
    // RFC 8037 App. A.3 canonical form, written directly: all three values are base64url or
    // fixed ASCII, so no escaping is needed.
    let json = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, B64URL.encode(key.as_bytes()));
    B64URL.encode(Sha256::digest(json.as_bytes()))
}

/// The public JWK of an Ed25519 key, with `kid` set to its thumbprint, as a directory serves it.
pub fn ed25519_public_jwk(key: &VerifyingKey) -> Value {
    serde_json::json!({
        "kty": "OKP",
        "crv": "Ed25519",
        "x": B64URL.encode(key.as_bytes()),
        "kid": ed25519_thumbprint(key),
        "use": "sig",
    })
}

/// Loads a public OKP/Ed25519 JWK (RFC 8037 §2) into a verifying key.
///
/// Refuses private keys (`d`), other key types and curves, an `alg` that is not Ed25519
/// (`ed25519` as in the HTTP Signature Algorithms registry, or JOSE `EdDSA`), and a `use`
/// other than `sig`. Members such as `kid`, `nbf`, `exp` are not read here.
pub fn verifying_key_from_jwk(jwk: &Value) -> Result<VerifyingKey, JwkError> {
    let obj = jwk.as_object().ok_or(JwkError::NotAnObject)?;
    let kty = member(obj, "kty")?;
    if kty != "OKP" {
        return Err(JwkError::UnsupportedKeyType(kty.to_owned()));
    }
    let crv = member(obj, "crv")?;
    if crv != "Ed25519" {
        return Err(JwkError::UnsupportedCurve(crv.to_owned()));
    }
    if obj.contains_key("d") {
        return Err(JwkError::PrivateKeyMaterial);
    }
    if let Some(alg) = obj.get("alg") {
        match alg.as_str() {
            Some("ed25519" | "EdDSA" | "Ed25519") => {}
            _ => return Err(JwkError::AlgorithmMismatch(alg.to_string().trim_matches('"').to_owned())),
        }
    }
    if let Some(usage) = obj.get("use") {
        if usage.as_str() != Some("sig") {
            return Err(JwkError::NotForSignatures(usage.to_string().trim_matches('"').to_owned()));
        }
    }
    let x = B64URL.decode(member(obj, "x")?).map_err(|e| JwkError::InvalidKey(e.to_string()))?;
    let bytes: [u8; 32] = x.as_slice().try_into().map_err(|_| JwkError::InvalidKey(format!("{} bytes, expected 32", x.len())))?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| JwkError::InvalidKey(e.to_string()))
}

fn member<'a>(obj: &'a Map<String, Value>, name: &'static str) -> Result<&'a str, JwkError> {
    obj.get(name).and_then(Value::as_str).ok_or(JwkError::MissingMember(name))
}

#[cfg(test)]
#[path = "jwk_tests.rs"]
mod tests;
