//! The compact forms a bearer token arrives in (pipeline stage 7, before any key is used):
//! `Authorization: Bearer <token68>` (RFC 6750 §2.1) or `DPoP <token68>` (RFC 9449 §7.1), and the JWS compact serialization of a
//! JWT (RFC 7515 §7.1): three base64url parts, a JOSE header and a JSON claims object, with the
//! header rules that need no key (RFC 9068 §4 `typ`, the accepted `alg`, RFC 7515 §4.1.11
//! `crit`).
//!
//! It trusts nothing: every byte comes from the client, and a decoded token is only a claim
//! until `token::verify_signature` checks it. No refusal quotes the token or what it decodes
//! to: JSON errors are reduced to their kind and position ([`json_error_text`]; serde_json's
//! own messages quote the strings they choke on), and `typ`/`alg` are quoted only when they
//! are registered names ([`shown_typ`], [`shown_alg`]). The token stage maps [`CompactError`] to
//! its `TokenError` without changing a byte of the refusal texts.

use base64::Engine as _;
use http::header::AUTHORIZATION;
use http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Longest token accepted; anything longer is refused before decoding.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Why a header or token could not be read, in the stage's words (without its prefixes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    /// `Authorization` is not `Bearer <token68>` or is sent twice; the text says which.
    #[error("{0}")]
    MalformedHeader(&'static str),
    /// The token is longer than [`MAX_TOKEN_LEN`].
    #[error("token longer than {MAX_TOKEN_LEN} bytes")]
    TooLong,
    /// The token does not have exactly three dot-separated parts.
    #[error("not a JWS compact serialization (three dot-separated parts)")]
    NotCompact,
    /// The header or claims part is not unpadded base64url.
    #[error("{part} is not base64url")]
    NotBase64url {
        /// `header` or `claims`.
        part: &'static str,
    },
    /// The header is not a JSON object with a string `alg` and string `typ`/`kid` (what is
    /// wrong, and where; never the header's text).
    #[error("header is not a JOSE header: {0}")]
    NotJoseHeader(String),
    /// The claims are not a JSON object ([`json_error_text`]: kind and position only).
    #[error("claims are not a JSON object: {0}")]
    ClaimsNotObject(String),
    /// `typ` is absent or not `at+jwt` (RFC 9068 §4).
    #[error("token type {:?} is not at+jwt", shown_typ(.typ))]
    WrongType {
        /// The `typ` sent, in full (empty when absent); shown only if registered.
        typ: String,
    },
    /// `alg` is not RS256, PS256, ES256 or EdDSA.
    #[error("token algorithm {:?} is not accepted", shown_alg(.alg))]
    UnsupportedAlgorithm {
        /// The `alg` sent, in full; shown only if registered.
        alg: String,
    },
    /// The header has `crit` extensions, which the gateway does not implement.
    #[error("token header has critical extensions")]
    CriticalHeader,
}

/// The signature algorithms the gateway accepts. `none` (RFC 8725 §3.1) and HMAC (the public
/// key used as a shared secret, RFC 8725 §2.1) are not among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PSS with SHA-256.
    Ps256,
    /// ECDSA P-256 with SHA-256.
    Es256,
    /// Ed25519 (RFC 8037).
    EdDsa,
}

/// A JWT whose shape and header rules passed; nothing in it is verified yet.
#[derive(Debug)]
pub struct Jws<'a> {
    /// The accepted `alg`.
    pub alg: Alg,
    /// The header's `kid`, if any.
    pub kid: Option<String>,
    /// `header.claims` exactly as sent: the bytes the signature covers (RFC 7515 §5.2).
    pub signing_input: &'a str,
    /// The third part, still base64url.
    pub signature: &'a str,
    /// The decoded claims object.
    pub claims: Map<String, Value>,
}

/// The JOSE header members the gateway reads (RFC 7515 §4.1).
#[derive(Debug, Deserialize)]
struct RawHeader {
    alg: String,
    typ: Option<String>,
    kid: Option<String>,
    crit: Option<Value>,
}

/// The authentication scheme an access token came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `Authorization: Bearer` (RFC 6750 §2.1).
    Bearer,
    /// `Authorization: DPoP` (RFC 9449 §7.1): the token is spent with a `DPoP` proof.
    Dpop,
}

/// The token of `Authorization: Bearer <token68>` (RFC 6750 §2.1; scheme case-insensitive,
/// RFC 9110 §11.1). `Ok(None)` when there is no `Authorization` header.
pub fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, CompactError> {
    Ok(credentials(headers, false)?.map(|(_, token)| token))
}

/// The scheme and token of `Authorization`: `Bearer <token68>`, or also `DPoP <token68>`
/// (RFC 9449 §7.1) when `accept_dpop`. `Ok(None)` when there is no `Authorization` header;
/// two of them (e.g. one of each scheme, RFC 9449 Figure 19) are malformed.
pub fn credentials(headers: &HeaderMap, accept_dpop: bool) -> Result<Option<(Scheme, &str)>, CompactError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(CompactError::MalformedHeader("sent more than once"));
    }
    let value = value.to_str().map_err(|_| CompactError::MalformedHeader("not ASCII"))?;
    let (scheme, rest) = value.split_once(' ').ok_or(CompactError::MalformedHeader("expected \"Bearer <token>\""))?;
    let scheme = if scheme.eq_ignore_ascii_case("bearer") {
        Scheme::Bearer
    } else if accept_dpop && scheme.eq_ignore_ascii_case("dpop") {
        Scheme::Dpop
    } else if accept_dpop {
        return Err(CompactError::MalformedHeader("scheme is not Bearer or DPoP"));
    } else {
        return Err(CompactError::MalformedHeader("scheme is not Bearer"));
    };
    let token = rest.trim_start_matches(' ');
    if token.is_empty() {
        return Err(CompactError::MalformedHeader("empty token"));
    }
    // b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
    let body = token.trim_end_matches('=');
    if body.is_empty() || !body.bytes().all(|b| matches!(b, b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'+' | b'/')) {
        return Err(CompactError::MalformedHeader("token is not a token68"));
    }
    Ok(Some((scheme, token)))
}

/// Whether `token` has the JWS compact shape (three parts); otherwise it is treated as opaque.
pub fn looks_like_jwt(token: &str) -> bool {
    token.bytes().filter(|b| *b == b'.').count() == 2
}

/// Decodes the header and claims and applies the header rules, in the order the refusals are
/// documented: length, shape, header, `typ`, `alg`, `crit`, claims. Nothing here trusts the
/// token: the caller checks the signature over [`Jws::signing_input`] before believing a claim.
pub fn decode(token: &str) -> Result<Jws<'_>, CompactError> {
    decode_typed(token, |typ| typ.eq_ignore_ascii_case("at+jwt") || typ.eq_ignore_ascii_case("application/at+jwt"))
}

/// [`decode`] for an OpenID Connect ID token: `typ` absent or `JWT` (OIDC Core §2 sets none;
/// an access token's `at+jwt` is refused, so one kind of token never passes for the other).
pub fn decode_id_token(token: &str) -> Result<Jws<'_>, CompactError> {
    decode_typed(token, |typ| typ.is_empty() || typ.eq_ignore_ascii_case("JWT"))
}

fn decode_typed(token: &str, is_accepted_typ: impl Fn(&str) -> bool) -> Result<Jws<'_>, CompactError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(CompactError::TooLong);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(CompactError::NotCompact);
    };
    let header_json = b64(h, "header")?;
    let header: RawHeader = serde_json::from_slice(&header_json).map_err(|e| CompactError::NotJoseHeader(header_problem(&header_json, &e)))?;
    // RFC 7515 §5.2 step 4: the header must be UTF-8 and a completely valid JSON object. A
    // derived struct also reads a JSON array, and serde_json skips the members it ignores
    // without checking their UTF-8, so the whole header is read once more as an object.
    serde_json::from_slice::<Map<String, Value>>(&header_json).map_err(|e| CompactError::NotJoseHeader(header_problem(&header_json, &e)))?;
    // RFC 9068 §4: the resource server MUST check `typ`; media types are case-insensitive.
    let typ = header.typ.as_deref().unwrap_or("");
    if !is_accepted_typ(typ) {
        return Err(CompactError::WrongType { typ: typ.to_owned() });
    }
    let alg = accepted_algorithm(&header.alg)?;
    // RFC 7515 §4.1.11: extensions we do not understand must make the token invalid.
    if header.crit.is_some() {
        return Err(CompactError::CriticalHeader);
    }
    let claims: Map<String, Value> = serde_json::from_slice(&b64(c, "claims")?).map_err(|e| CompactError::ClaimsNotObject(json_error_text(&e)))?;
    let signing_input = &token[..h.len() + 1 + c.len()];
    Ok(Jws { alg, kid: header.kid, signing_input, signature, claims })
}

/// A JSON error as a refusal may say it. Syntax and end-of-input messages are serde_json's
/// fixed texts with a position; its type errors quote the strings, numbers and member names
/// they choke on (`invalid type: string "…"`), which here are the token's own content, so
/// those are reduced to a position.
pub fn json_error_text(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => e.to_string(),
        Category::Data | Category::Io => format!("JSON of another type or shape at line {} column {}", e.line(), e.column()),
    }
}

/// What is wrong with a header the `RawHeader` shape refused, in the gateway's words.
fn header_problem(header_json: &[u8], e: &serde_json::Error) -> String {
    if e.classify() != serde_json::error::Category::Data {
        return json_error_text(e);
    }
    let Ok(members) = serde_json::from_slice::<Map<String, Value>>(header_json) else {
        return "not a JSON object".to_owned();
    };
    let is_string_or_absent = |name: &str| members.get(name).is_none_or(|v| v.is_string() || v.is_null());
    if !members.get("alg").is_some_and(Value::is_string) {
        "alg is missing or not a string".to_owned()
    } else if !is_string_or_absent("typ") || !is_string_or_absent("kid") {
        "typ or kid is not a string".to_owned()
    } else {
        // serde_json's object reader kept the last of repeated members; the derived shape did not.
        "a member is repeated".to_owned()
    }
}

/// JOSE `typ` values a refusal may quote (RFC 9068, RFC 7519, RFC 9449, RFC 8417 and the
/// OpenID logout token); any other value is the client's text and is not shown.
const REGISTERED_TYPS: [&str; 8] = ["", "JWT", "at+jwt", "application/at+jwt", "dpop+jwt", "JOSE", "secevent+jwt", "logout+jwt"];

/// JWS `alg` values a refusal may quote (RFC 7518 §3.1, RFC 8037, RFC 8812).
const REGISTERED_ALGS: [&str; 17] =
    ["none", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA", "Ed25519", "Ed448", "ES256K"];

/// `typ` as a refusal may quote it: registered values (case-insensitively), else a description.
pub fn shown_typ(typ: &str) -> &str {
    match REGISTERED_TYPS.iter().find(|t| t.eq_ignore_ascii_case(typ)) {
        Some(_) => typ,
        None => "(unregistered)",
    }
}

/// `alg` as a refusal may quote it: registered values, else a description.
pub fn shown_alg(alg: &str) -> &str {
    if REGISTERED_ALGS.contains(&alg) {
        alg
    } else {
        "(unregistered)"
    }
}

fn accepted_algorithm(alg: &str) -> Result<Alg, CompactError> {
    match alg {
        "RS256" => Ok(Alg::Rs256),
        "PS256" => Ok(Alg::Ps256),
        "ES256" => Ok(Alg::Es256),
        "EdDSA" => Ok(Alg::EdDsa),
        other => Err(CompactError::UnsupportedAlgorithm { alg: other.to_owned() }),
    }
}

fn b64(part: &str, what: &'static str) -> Result<Vec<u8>, CompactError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).map_err(|_| CompactError::NotBase64url { part: what })
}
