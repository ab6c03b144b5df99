//! The issuer's documents, parsed (docs/design.md stage 7): the JWK Set (RFC 7517 §5) with the
//! `Cache-Control` it came with, and the `jwks_uri` of an RFC 8414 metadata document. Pure
//! functions over the bytes the issuer sent, the fetches are the gateway's (`oauth/jwks.rs`,
//! `oauth/issuer.rs`).
//!
//! Only asymmetric keys usable for RS256/PS256 (RSA), ES256 (P-256) and EdDSA (Ed25519) are
//! kept; symmetric (`oct`) keys and `use = "enc"` keys are ignored.

use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;

/// Shortest time a key set is kept, whatever `Cache-Control` says (`no-store` included).
pub const MIN_TTL: Duration = Duration::from_secs(10);
/// Longest time a key set is kept.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Kept when the issuer sends no `max-age`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// The kind of public key an algorithm needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA (RS256, PS256).
    Rsa,
    /// EC on P-256 (ES256).
    EcP256,
    /// OKP Ed25519 (EdDSA).
    Ed25519,
}

/// One usable issuer key.
#[derive(Debug, Clone)]
pub struct PublicKey {
    /// The JWK `kid`.
    pub kid: Option<String>,
    /// Key type.
    pub kind: KeyKind,
    /// The JWK `alg`, when given: the only algorithm this key may verify.
    pub alg: Option<Algorithm>,
    /// The verification key.
    pub key: DecodingKey,
}

/// The issuer's usable keys and how long to keep them.
#[derive(Debug)]
pub struct KeySet {
    /// The usable keys, in document order.
    pub keys: Vec<PublicKey>,
    /// How long to keep them (the `Cache-Control` the set came with, clamped).
    pub ttl: Duration,
}

#[derive(Deserialize)]
struct RawJwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl KeySet {
    /// Parses a JWKS document (RFC 7517 §5). Keys it cannot use are skipped, not fatal: an
    /// issuer may publish encryption or other-curve keys beside its signing keys.
    pub fn parse(body: &[u8], ttl: Duration) -> Result<KeySet, String> {
        #[derive(Deserialize)]
        struct Doc {
            keys: Vec<Value>,
        }
        let doc: Doc = serde_json::from_slice(body).and_then(from_object).map_err(|e| format!("not a JWK Set: {e}"))?;
        let jwks = doc.keys.into_iter().filter_map(|v| if let Value::Object(jwk) = v { from_object::<RawJwk>(jwk).ok() } else { None });
        let keys = jwks.filter_map(usable_key).collect();
        Ok(KeySet { keys, ttl })
    }

    /// Keys of `kind` that `kid` may name: with a kid, the keys with that kid; without, every
    /// key of the kind (RFC 7515 §4.1.4 makes `kid` optional).
    pub fn candidates(&self, kid: Option<&str>, kind: KeyKind) -> Vec<&PublicKey> {
        self.keys.iter().filter(|k| k.kind == kind && (kid.is_none() || k.kid.as_deref() == kid)).collect()
    }

    /// Whether any key carries `kid`, of whatever kind.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

fn usable_key(jwk: RawJwk) -> Option<PublicKey> {
    if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
        return None;
    }
    let alg = match jwk.alg.as_deref() {
        None => None,
        Some("RS256") => Some(Algorithm::RS256),
        Some("PS256") => Some(Algorithm::PS256),
        Some("ES256") => Some(Algorithm::ES256),
        Some("EdDSA") => Some(Algorithm::EdDSA),
        Some(_) => return None,
    };
    let (kind, key) = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => (KeyKind::Rsa, DecodingKey::from_rsa_components(jwk.n.as_deref()?, jwk.e.as_deref()?).ok()?),
        ("EC", Some("P-256")) => {
            let (x, y) = (jwk.x.as_deref()?, jwk.y.as_deref()?);
            if decoded_len(x) != Some(32) || decoded_len(y) != Some(32) {
                return None;
            }
            (KeyKind::EcP256, DecodingKey::from_ec_components(x, y).ok()?)
        }
        ("OKP", Some("Ed25519")) => {
            let x = jwk.x.as_deref()?;
            if decoded_len(x) != Some(32) {
                return None;
            }
            (KeyKind::Ed25519, DecodingKey::from_ed_components(x).ok()?)
        }
        _ => return None,
    };
    Some(PublicKey { kid: jwk.kid, kind, alg, key })
}

/// `T` read from a JSON object. Documents and keys are objects (RFC 7517 §4, §5, RFC 8414
/// §3.2), so each is read as a map first: serde's derived structs alone would also take a JSON
/// array as their fields in order (`[[jwk]]` as a JWK Set).
fn from_object<T: DeserializeOwned>(map: Map<String, Value>) -> Result<T, serde_json::Error> {
    serde_json::from_value(Value::Object(map))
}

fn decoded_len(b64: &str) -> Option<usize> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(b64).ok().map(|v| v.len())
}

/// How long to keep a key set: `max-age` (RFC 9111 §5.2.2.1) clamped, `no-store`/`no-cache`
/// as the minimum.
pub fn ttl_from_cache_control(cc: Option<&str>) -> Duration {
    let Some(cc) = cc else { return DEFAULT_TTL };
    let mut ttl = DEFAULT_TTL;
    for directive in cc.split(',').map(str::trim) {
        let lower = directive.to_ascii_lowercase();
        if lower == "no-store" || lower == "no-cache" {
            return MIN_TTL;
        }
        if let Some(v) = lower.strip_prefix("max-age=") {
            if let Ok(secs) = v.trim_matches('"').parse::<u64>() {
                ttl = Duration::from_secs(secs);
            }
        }
    }
    ttl.clamp(MIN_TTL, MAX_TTL)
}

/// The `jwks_uri` of an RFC 8414 metadata document, trusted only when its `issuer` is
/// identical to `issuer` (§3.3) and the URI is https. `Err` is the reason, without the body.
pub fn jwks_uri_of(issuer: &str, body: &[u8]) -> Result<Url, String> {
    #[derive(Deserialize)]
    struct Metadata {
        issuer: String,
        jwks_uri: Option<String>,
    }
    let md: Metadata = serde_json::from_slice(body).and_then(from_object).map_err(|e| format!("not a metadata document: {e}"))?;
    // RFC 8414 §3.3: the returned issuer MUST be identical to the one the URL was built from.
    if md.issuer != issuer {
        return Err(format!("metadata names issuer {:?}", short(&md.issuer)));
    }
    let jwks = md.jwks_uri.ok_or("metadata has no jwks_uri")?;
    let jwks = Url::parse(&jwks).map_err(|e| format!("jwks_uri is not a URL: {e}"))?;
    if jwks.scheme() != "https" {
        return Err("jwks_uri is not https".to_owned());
    }
    Ok(jwks)
}

/// Shortens issuer-supplied text quoted in errors (a published `kid`, a metadata `issuer`) to
/// 64 characters.
pub fn short(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";

    /// Found by fuzz/fuzz_targets/issuer_documents.rs: serde's derived structs also read a JSON
    /// array as their fields in order, so `[[jwk]]` passed for a JWK Set, `["RSA", …]` for a
    /// JWK and `[issuer, jwks_uri]` for metadata. RFC 7517 §4, §5 and RFC 8414 §3.2: objects.
    #[test]
    fn documents_and_keys_must_be_json_objects() {
        let jwk = format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{ED_X}"}}"#);
        assert_eq!(KeySet::parse(format!(r#"{{"keys":[{jwk}]}}"#).as_bytes(), DEFAULT_TTL).expect("object").keys.len(), 1);
        let err = KeySet::parse(format!("[[{jwk}]]").as_bytes(), DEFAULT_TTL).expect_err("an array is not a JWK Set");
        assert!(err.starts_with("not a JWK Set: invalid type: sequence"), "{err}");
        let set = KeySet::parse(format!(r#"{{"keys":[["OKP",null,null,null,"Ed25519",null,null,"{ED_X}"]]}}"#).as_bytes(), DEFAULT_TTL).expect("object");
        assert!(set.keys.is_empty(), "an array entry is not a JWK");
        let issuer = "https://issuer.example";
        let ok = jwks_uri_of(issuer, br#"{"issuer":"https://issuer.example","jwks_uri":"https://issuer.example/jwks"}"#);
        assert_eq!(ok.map(String::from), Ok("https://issuer.example/jwks".to_owned()));
        let err = jwks_uri_of(issuer, br#"["https://issuer.example","https://issuer.example/jwks"]"#).expect_err("an array is not metadata");
        assert!(err.starts_with("not a metadata document: invalid type: sequence"), "{err}");
    }
}
