//! DPoP proofs (RFC 9449) as a resource server reads them: the `DPoP` request field, the proof
//! JWT's header and claims (§4.2), its signature by the key in its own `jwk` header, and the
//! checks against the request it came with (§4.3, §7.1): `htm`, `htu` (normalised, §4.3 with
//! RFC 3986 §6.2.2–6.2.3), the `iat` window and `ath`. The proof key's RFC 7638 thumbprint is
//! what a token's `cnf.jkt` must name (§6.1).
//!
//! Single use of `jti` needs a store and is the gateway's (`portcullis::oauth`); so are the
//! token and its binding. Here everything is pure over the client's bytes and the request's
//! one clock reading, and trusts none of them: the proof is a claim until [`parse`] verified
//! its signature, and even then it only proves that whoever sent it holds the key.
//!
//! Refusal texts name what failed, never the proof, its claims or its key: `typ` and `alg` are
//! quoted only when registered ([`jose::shown_typ`], [`jose::shown_alg`]), JSON errors are
//! reduced to kind and position ([`jose::json_error_text`]).
//!
//! Signatures are checked by RustCrypto's crates (ed25519-dalek, p256, rsa), never here.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::HeaderMap;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::jose;
use crate::signature::jwk;
use crate::UnixTime;

/// The request field that carries the proof (RFC 9449 §4.1).
pub const DPOP: &str = "dpop";

/// The `algs` of a `DPoP` challenge: every `alg` [`parse`] accepts, RFC 9864's `Ed25519`
/// beside the polymorphic `EdDSA` it deprecates (maintained libraries emit either).
pub const ACCEPTED_ALGS: &str = "ES256 EdDSA Ed25519 RS256 PS256";

/// Longest proof accepted; anything longer is refused before decoding. A proof with an RSA
/// 4096 key in its header is under 2 KiB.
pub const MAX_PROOF_LEN: usize = 8 * 1024;

/// Longest `jti` accepted (RFC 9449 §11.1: reject "unnecessarily large" values). 96 random bits
/// or a UUID are 16 to 36 characters.
pub const MAX_JTI_LEN: usize = 256;

/// Smallest RSA modulus accepted, in bits (RFC 7518 §3.3, §3.5).
const MIN_RSA_BITS: usize = 2048;

/// JWK members that hold private key material (RFC 7518 §6.2.2, §6.3.2, §6.4.1; RFC 8037 §2).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// Why a DPoP proof is refused: each is RFC 9449's `invalid_dpop_proof`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DpopError {
    /// No `DPoP` field where the `DPoP` scheme needs one.
    #[error("the DPoP scheme needs a DPoP proof header")]
    Missing,
    /// More than one `DPoP` field (§4.3 check 1), or one that is not ASCII.
    #[error("DPoP header {0}")]
    MalformedHeader(&'static str),
    /// The proof is longer than [`MAX_PROOF_LEN`].
    #[error("proof longer than {MAX_PROOF_LEN} bytes")]
    TooLong,
    /// The proof does not have exactly three dot-separated parts (§4.3 check 2).
    #[error("proof is not a JWS compact serialization (three dot-separated parts)")]
    NotCompact,
    /// A part is not unpadded base64url.
    #[error("proof {part} is not base64url")]
    NotBase64url {
        /// `header`, `claims` or `signature`.
        part: &'static str,
    },
    /// The header is not a JSON object with the members a proof needs (what is wrong, and
    /// where; never the header's text).
    #[error("proof header is not a JOSE header: {0}")]
    NotJoseHeader(String),
    /// The claims are not a JSON object.
    #[error("proof claims are not a JSON object: {0}")]
    ClaimsNotObject(String),
    /// `typ` is absent or not `dpop+jwt` (§4.3 check 4).
    #[error("proof type {:?} is not dpop+jwt", jose::shown_typ(.typ))]
    WrongType {
        /// The `typ` sent (empty when absent); shown only if registered.
        typ: String,
    },
    /// `alg` is not an accepted asymmetric algorithm (§4.3 check 5): `none`, HMAC and
    /// unknown names are refused.
    #[error("proof algorithm {:?} is not accepted (accepted: {ACCEPTED_ALGS})", jose::shown_alg(.alg))]
    UnsupportedAlgorithm {
        /// The `alg` sent; shown only if registered.
        alg: String,
    },
    /// The header has `crit` extensions, which the gateway does not implement.
    #[error("proof header has critical extensions")]
    CriticalHeader,
    /// `jwk` is absent or not an object.
    #[error("proof header has no jwk object")]
    MissingKey,
    /// `jwk` carries private key material (§4.3 check 7).
    #[error("proof jwk contains a private key")]
    PrivateKey,
    /// `jwk` is not a key of the type `alg` needs, or not a valid public key.
    #[error("proof jwk is not a usable {alg} public key: {reason}")]
    UnusableKey {
        /// The accepted `alg` of the header.
        alg: &'static str,
        /// What is wrong (member names and sizes only).
        reason: String,
    },
    /// The signature does not verify with the header's key (§4.3 check 6).
    #[error("proof signature does not verify with its jwk")]
    BadSignature,
    /// A required claim is absent (§4.3 check 3; `ath` at a resource server, §7.1).
    #[error("proof has no {claim} claim")]
    MissingClaim {
        /// The claim name.
        claim: &'static str,
    },
    /// A claim has the wrong JSON type or is out of bounds (a `jti` over [`MAX_JTI_LEN`]).
    #[error("proof claim {claim} has the wrong type or size")]
    InvalidClaim {
        /// The claim name.
        claim: &'static str,
    },
    /// `htm` is not the request's method (§4.3 check 8).
    #[error("htm does not match the request method")]
    WrongMethod,
    /// `htu` is not the request's URI, normalised (§4.3 check 9).
    #[error("htu does not match the request")]
    WrongUri,
    /// `iat` is older than the window allows (§4.3 check 11).
    #[error("proof is too old (iat {iat}, accepted for {max_age_secs}s)")]
    TooOld {
        /// The proof's `iat`.
        iat: u64,
        /// The configured window.
        max_age_secs: u64,
    },
    /// `iat` is in the future beyond the clock skew.
    #[error("proof issued in the future (iat {iat})")]
    IssuedInFuture {
        /// The proof's `iat`.
        iat: u64,
    },
    /// `ath` is not the hash of the presented access token (§4.3 check 12).
    #[error("ath does not match the access token")]
    WrongTokenHash,
    /// `content_digest` (the MCP DPoP extension draft) does not match the request body.
    #[error("content_digest does not match the request body")]
    WrongContentDigest,
    /// This proof's `jti` was already used (§11.1).
    #[error("proof jti was already used")]
    Replayed,
    /// `oauth.require_agent_key_binding`: the proof's key is not the key of the request's
    /// HTTP Message Signature.
    #[error("proof key is not the agent's signing key")]
    NotAgentKey,
}

/// The proof algorithms accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpopAlg {
    /// ECDSA P-256 with SHA-256.
    Es256,
    /// Ed25519, by its polymorphic JOSE name (RFC 8037).
    EdDsa,
    /// Ed25519, by its RFC 9864 fully specified name.
    Ed25519,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PSS with SHA-256 (salt of 32 bytes, RFC 7518 §3.5).
    Ps256,
}

impl DpopAlg {
    fn from_name(alg: &str) -> Option<DpopAlg> {
        match alg {
            "ES256" => Some(DpopAlg::Es256),
            "EdDSA" => Some(DpopAlg::EdDsa),
            "Ed25519" => Some(DpopAlg::Ed25519),
            "RS256" => Some(DpopAlg::Rs256),
            "PS256" => Some(DpopAlg::Ps256),
            _ => None,
        }
    }

    /// The JOSE name.
    pub fn as_str(self) -> &'static str {
        match self {
            DpopAlg::Es256 => "ES256",
            DpopAlg::EdDsa => "EdDSA",
            DpopAlg::Ed25519 => "Ed25519",
            DpopAlg::Rs256 => "RS256",
            DpopAlg::Ps256 => "PS256",
        }
    }
}

/// A public key from a proof's `jwk`, of the type its `alg` needs.
#[derive(Debug, Clone)]
enum ProofKey {
    Ed25519(ed25519_dalek::VerifyingKey),
    P256(p256::ecdsa::VerifyingKey),
    Rsa(rsa::RsaPublicKey),
}

/// A proof whose header, claims and signature passed: its key signed it. Nothing is yet known
/// about the request it came with: [`Proof::check`] compares the two.
#[derive(Debug, Clone)]
pub struct Proof {
    alg: DpopAlg,
    jkt: String,
    jti: String,
    htm: String,
    htu: String,
    iat: u64,
    ath: Option<String>,
    content_digest: Option<String>,
}

impl Proof {
    /// The accepted algorithm.
    pub fn alg(&self) -> DpopAlg {
        self.alg
    }
    /// The RFC 7638 SHA-256 thumbprint of the proof key, base64url: what `cnf.jkt` must be.
    pub fn jkt(&self) -> &str {
        &self.jkt
    }
    /// The proof's unique id (at most [`MAX_JTI_LEN`] bytes).
    pub fn jti(&self) -> &str {
        &self.jti
    }
    /// Creation time, Unix seconds.
    pub fn iat(&self) -> u64 {
        self.iat
    }

    /// §4.3 checks 8, 9, 11 and 12 against `request`: `htm`, `htu`, the `iat` window, `ath`.
    /// `jti` single use is the caller's (it needs a store), after this passed.
    pub fn check(&self, request: &Request<'_>) -> Result<(), DpopError> {
        // RFC 9110 methods are case-sensitive.
        if self.htm != request.method {
            return Err(DpopError::WrongMethod);
        }
        match normalise_htu(&self.htu) {
            Some(htu) if request.uris.contains(&htu) => {}
            _ => return Err(DpopError::WrongUri),
        }
        let now = request.now.secs();
        if self.iat.saturating_add(request.max_age_secs).saturating_add(request.skew_secs) < now {
            return Err(DpopError::TooOld { iat: self.iat, max_age_secs: request.max_age_secs });
        }
        if self.iat > now.saturating_add(request.skew_secs) {
            return Err(DpopError::IssuedInFuture { iat: self.iat });
        }
        let ath = self.ath.as_deref().ok_or(DpopError::MissingClaim { claim: "ath" })?;
        if ath != access_token_hash(request.access_token) {
            return Err(DpopError::WrongTokenHash);
        }
        // The MCP DPoP extension (a draft) binds the proof to the body with an RFC 9530 value;
        // optional here (the request's HTTP Message Signature covers Content-Digest), checked
        // when present.
        if let Some(value) = &self.content_digest {
            let mut headers = HeaderMap::new();
            let value = http::HeaderValue::from_str(value).map_err(|_| DpopError::InvalidClaim { claim: "content_digest" })?;
            headers.insert(crate::digest::CONTENT_DIGEST, value);
            match crate::digest::DigestCheck::new(false).verify(&headers, request.body) {
                Ok(_) => {}
                Err(crate::digest::DigestError::Mismatch { .. }) => return Err(DpopError::WrongContentDigest),
                Err(_) => return Err(DpopError::InvalidClaim { claim: "content_digest" }),
            }
        }
        Ok(())
    }

    /// Until when the `jti` must be remembered: past `iat + max_age + skew` the proof is
    /// refused as too old anyway.
    pub fn usable_until(&self, max_age_secs: u64, skew_secs: u64) -> u64 {
        self.iat.saturating_add(max_age_secs).saturating_add(skew_secs)
    }
}

/// The request a proof is checked against.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The HTTP method, as received.
    pub method: &'a str,
    /// The request's public URIs, each already [`normalise_htu`]d: the gateway's public
    /// scheme and authority (one per name it answers to) with the request path.
    pub uris: &'a [String],
    /// The access token of `Authorization: DPoP <token>`.
    pub access_token: &'a str,
    /// The raw request body (for a proof's `content_digest`).
    pub body: &'a [u8],
    /// The request's one clock reading.
    pub now: UnixTime,
    /// How long after `iat` a proof is accepted.
    pub max_age_secs: u64,
    /// Tolerated clock difference, both ways.
    pub skew_secs: u64,
}

/// The proof in the request's `DPoP` field. `Ok(None)` when there is none; more than one field
/// is refused (§4.3 check 1).
pub fn proof_header(headers: &HeaderMap) -> Result<Option<&str>, DpopError> {
    let mut values = headers.get_all(DPOP).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(DpopError::MalformedHeader("sent more than once"));
    }
    let value = value.to_str().map_err(|_| DpopError::MalformedHeader("not ASCII"))?;
    Ok(Some(value.trim_matches(' ')))
}

/// `ath` for `token`: base64url(SHA-256(ASCII(token))) (RFC 9449 §4.2).
pub fn access_token_hash(token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(token.as_bytes()))
}

/// Reads a proof and verifies its signature with the key in its own header: §4.3 checks 2–7,
/// in the order the refusals are documented (length, shape, header, `typ`, `alg`, `crit`,
/// `jwk`, signature, claims). Nothing about the request is checked here ([`Proof::check`]).
pub fn parse(proof: &str) -> Result<Proof, DpopError> {
    if proof.len() > MAX_PROOF_LEN {
        return Err(DpopError::TooLong);
    }
    let mut parts = proof.split('.');
    let (Some(h), Some(c), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(DpopError::NotCompact);
    };
    let header_json = b64(h, "header")?;
    let header: Map<String, Value> = serde_json::from_slice(&header_json).map_err(|e| DpopError::NotJoseHeader(jose::json_error_text(&e)))?;
    let typ = match header.get("typ") {
        None => "",
        Some(Value::String(t)) => t,
        Some(_) => return Err(DpopError::NotJoseHeader("typ is not a string".to_owned())),
    };
    // RFC 9449 §4.2 with RFC 8725 §3.11: explicit typing; media types are case-insensitive.
    if !typ.eq_ignore_ascii_case("dpop+jwt") && !typ.eq_ignore_ascii_case("application/dpop+jwt") {
        return Err(DpopError::WrongType { typ: typ.to_owned() });
    }
    let alg_name = header.get("alg").and_then(Value::as_str).ok_or_else(|| DpopError::NotJoseHeader("alg is missing or not a string".to_owned()))?;
    let alg = DpopAlg::from_name(alg_name).ok_or_else(|| DpopError::UnsupportedAlgorithm { alg: alg_name.to_owned() })?;
    // RFC 7515 §4.1.11: extensions we do not understand must make the JWS invalid.
    if header.contains_key("crit") {
        return Err(DpopError::CriticalHeader);
    }
    let jwk = header.get("jwk").filter(|k| k.is_object()).ok_or(DpopError::MissingKey)?;
    let key = public_key(alg, jwk)?;
    let signature = b64(s, "signature")?;
    let signing_input = &proof[..h.len() + 1 + c.len()];
    verify(&key, alg, signing_input.as_bytes(), &signature)?;
    let jkt = jwk::jwk_thumbprint(jwk).map_err(|e| DpopError::UnusableKey { alg: alg.as_str(), reason: e.to_string() })?;
    let claims: Map<String, Value> = serde_json::from_slice(&b64(c, "claims")?).map_err(|e| DpopError::ClaimsNotObject(jose::json_error_text(&e)))?;
    let jti = string_claim(&claims, "jti")?.ok_or(DpopError::MissingClaim { claim: "jti" })?;
    if jti.is_empty() || jti.len() > MAX_JTI_LEN {
        return Err(DpopError::InvalidClaim { claim: "jti" });
    }
    let htm = string_claim(&claims, "htm")?.ok_or(DpopError::MissingClaim { claim: "htm" })?;
    let htu = string_claim(&claims, "htu")?.ok_or(DpopError::MissingClaim { claim: "htu" })?;
    let iat = match claims.get("iat") {
        None | Some(Value::Null) => return Err(DpopError::MissingClaim { claim: "iat" }),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => u,
            (None, Some(f)) if f >= 0.0 && f.is_finite() => f.floor() as u64,
            _ => return Err(DpopError::InvalidClaim { claim: "iat" }),
        },
        Some(_) => return Err(DpopError::InvalidClaim { claim: "iat" }),
    };
    let ath = string_claim(&claims, "ath")?.map(str::to_owned);
    let content_digest = string_claim(&claims, "content_digest")?.map(str::to_owned);
    Ok(Proof { alg, jkt, jti: jti.to_owned(), htm: htm.to_owned(), htu: htu.to_owned(), iat, ath, content_digest })
}

/// `htu` or a request URI in the form §4.3 compares: RFC 3986 §6.2.2 (scheme and host in lower
/// case, percent-encodings in upper case and decoded where they name an unreserved character,
/// dot segments removed) and §6.2.3 (default port dropped, empty path `/`), without query and
/// fragment. `None` when it is not an absolute http(s) URI, or when its path has a `%` not
/// followed by two hex digits (not a URI by RFC 3986; decoding around it could make a new
/// escape: `/%%610` would become `/%a0`, which a second reading decodes again).
pub fn normalise_htu(uri: &str) -> Option<String> {
    // The WHATWG parser is lenient where RFC 3986 is not: it reads `\` as `/`, drops tabs and
    // newlines and takes `https:host/…` without `//`. Such a value has one reading here and
    // another elsewhere: refuse it instead.
    let after_scheme = uri.split_once(':').map(|(_, rest)| rest)?;
    if !after_scheme.starts_with("//") || uri.bytes().any(|b| b == b'\\' || b <= b' ' || b == 0x7f) {
        return None;
    }
    // The url crate (WHATWG) lowercases scheme and host, drops the default port, removes dot
    // segments and makes an empty path `/`; percent-encodings it leaves as they are.
    let mut url = url::Url::parse(uri).ok()?;
    if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() || !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    url.set_query(None);
    url.set_fragment(None);
    let path = normalise_percent_encoding(url.path())?;
    Some(format!("{}://{}{path}", url.scheme(), &url[url::Position::BeforeHost..url::Position::AfterPort]))
}

/// RFC 3986 §6.2.2.1–6.2.2.2 on a path: `%xx` of an unreserved character decoded, every other
/// `%xx` in upper case. `None` for a `%` that does not start a `%xx`.
fn normalise_percent_encoding(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|&b| char::from(b).to_digit(16));
        if bytes[i] == b'%' {
            let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else { return None };
            let c = (hi * 16 + lo) as u8;
            if c.is_ascii_alphanumeric() || b"-._~".contains(&c) {
                out.push(char::from(c));
            } else {
                out.push('%');
                out.push(char::from(bytes[i + 1]).to_ascii_uppercase());
                out.push(char::from(bytes[i + 2]).to_ascii_uppercase());
            }
            i += 3;
            continue;
        }
        // `path` is ASCII (the url crate percent-encodes everything else), so bytes are chars.
        out.push(char::from(bytes[i]));
        i += 1;
    }
    Some(out)
}

/// The key in `jwk`, if it is public and of the type `alg` needs.
fn public_key(alg: DpopAlg, jwk: &Value) -> Result<ProofKey, DpopError> {
    let obj = jwk.as_object().ok_or(DpopError::MissingKey)?;
    if PRIVATE_MEMBERS.iter().any(|m| obj.contains_key(*m)) {
        return Err(DpopError::PrivateKey);
    }
    let unusable = |reason: String| DpopError::UnusableKey { alg: alg.as_str(), reason };
    let kty = obj.get("kty").and_then(Value::as_str).unwrap_or("");
    match alg {
        DpopAlg::EdDsa | DpopAlg::Ed25519 => {
            if kty != "OKP" {
                return Err(unusable("kty is not OKP".to_owned()));
            }
            // The JWK's own texts would quote `crv`, `alg` or `use`: the client's words.
            jwk::verifying_key_from_jwk(jwk).map(ProofKey::Ed25519).map_err(|e| {
                unusable(match e {
                    jwk::JwkError::MissingMember(m) => format!("member {m} is missing or not a string"),
                    jwk::JwkError::InvalidKey(_) => "x is not a valid Ed25519 public key".to_owned(),
                    _ => "not an Ed25519 signing key (crv, alg or use)".to_owned(),
                })
            })
        }
        DpopAlg::Es256 => {
            if kty != "EC" || obj.get("crv").and_then(Value::as_str) != Some("P-256") {
                return Err(unusable("not an EC P-256 key".to_owned()));
            }
            let x = coordinate(obj, "x").ok_or_else(|| unusable("x is not 32 bytes of base64url".to_owned()))?;
            let y = coordinate(obj, "y").ok_or_else(|| unusable("y is not 32 bytes of base64url".to_owned()))?;
            let point = p256::EncodedPoint::from_affine_coordinates(&x.into(), &y.into(), false);
            p256::ecdsa::VerifyingKey::from_encoded_point(&point).map(ProofKey::P256).map_err(|_| unusable("not a point on P-256".to_owned()))
        }
        DpopAlg::Rs256 | DpopAlg::Ps256 => {
            if kty != "RSA" {
                return Err(unusable("kty is not RSA".to_owned()));
            }
            let n = big_uint(obj, "n").ok_or_else(|| unusable("n is not base64url".to_owned()))?;
            let e = big_uint(obj, "e").ok_or_else(|| unusable("e is not base64url".to_owned()))?;
            if n.bits() < MIN_RSA_BITS {
                return Err(unusable(format!("modulus under {MIN_RSA_BITS} bits")));
            }
            rsa::RsaPublicKey::new(n, e).map(ProofKey::Rsa).map_err(|e| unusable(e.to_string()))
        }
    }
}

fn coordinate(obj: &Map<String, Value>, name: &str) -> Option<[u8; 32]> {
    let bytes = URL_SAFE_NO_PAD.decode(obj.get(name)?.as_str()?).ok()?;
    bytes.try_into().ok()
}

fn big_uint(obj: &Map<String, Value>, name: &str) -> Option<rsa::BigUint> {
    let bytes = URL_SAFE_NO_PAD.decode(obj.get(name)?.as_str()?).ok()?;
    (!bytes.is_empty()).then(|| rsa::BigUint::from_bytes_be(&bytes))
}

/// Checks the JWS signature (RFC 7515 §5.2) over `signing_input` with `key`.
fn verify(key: &ProofKey, alg: DpopAlg, signing_input: &[u8], signature: &[u8]) -> Result<(), DpopError> {
    use rsa::signature::Verifier as _;
    let ok = match (key, alg) {
        (ProofKey::Ed25519(k), DpopAlg::EdDsa | DpopAlg::Ed25519) => {
            let Ok(sig) = ed25519_dalek::Signature::from_slice(signature) else { return Err(DpopError::BadSignature) };
            k.verify_strict(signing_input, &sig).is_ok()
        }
        (ProofKey::P256(k), DpopAlg::Es256) => {
            // JWS ES256 is R || S, 64 bytes (RFC 7518 §3.4), not DER.
            let Ok(sig) = p256::ecdsa::Signature::from_slice(signature) else { return Err(DpopError::BadSignature) };
            k.verify(signing_input, &sig).is_ok()
        }
        (ProofKey::Rsa(k), DpopAlg::Rs256) => {
            let Ok(sig) = rsa::pkcs1v15::Signature::try_from(signature) else { return Err(DpopError::BadSignature) };
            rsa::pkcs1v15::VerifyingKey::<Sha256>::new(k.clone()).verify(signing_input, &sig).is_ok()
        }
        (ProofKey::Rsa(k), DpopAlg::Ps256) => {
            let Ok(sig) = rsa::pss::Signature::try_from(signature) else { return Err(DpopError::BadSignature) };
            rsa::pss::VerifyingKey::<Sha256>::new(k.clone()).verify(signing_input, &sig).is_ok()
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(DpopError::BadSignature)
    }
}

fn string_claim<'a>(claims: &'a Map<String, Value>, name: &'static str) -> Result<Option<&'a str>, DpopError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(DpopError::InvalidClaim { claim: name }),
    }
}

fn b64(part: &str, what: &'static str) -> Result<Vec<u8>, DpopError> {
    URL_SAFE_NO_PAD.decode(part).map_err(|_| DpopError::NotBase64url { part: what })
}

/// A proof for one request, signed with an agent's Ed25519 key (`alg` `EdDSA`, RFC 8037): what
/// `portcullis request --dpop` and `portcullis_client` send. `jti` is 128 random bits.
pub fn ed25519_proof(key: &ed25519_dalek::SigningKey, method: &str, htu: &str, access_token: &str, iat: u64) -> String {
    use ed25519_dalek::Signer as _;
    let jti: [u8; 16] = rand::random();
    let header = serde_json::json!({
        "typ": "dpop+jwt",
        "alg": "EdDSA",
        "jwk": {"kty": "OKP", "crv": "Ed25519", "x": URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes())},
    });
    let claims = serde_json::json!({
        "jti": URL_SAFE_NO_PAD.encode(jti),
        "htm": method,
        "htu": htu,
        "iat": iat,
        "ath": access_token_hash(access_token),
    });
    let signing_input = format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
    let signature = key.sign(signing_input.as_bytes());
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

#[cfg(test)]
#[path = "dpop_tests.rs"]
mod tests;
