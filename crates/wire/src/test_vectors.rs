//! Test helpers: the standards vectors (read at test time from the repository's
//! `tests/vectors/`, whose README names each file's source) and a small parser for the
//! HTTP/1.1 message text they carry. Compiled for this crate's tests and, with the
//! `test-vectors` feature, for the gateway's.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, missing_docs)]

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use serde_json::Value;

/// Loads `tests/vectors/<file>` (see its README for each file's source).
pub fn vectors(file: &str) -> Value {
    let path = format!("{}/../../tests/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// The `cases` of a vector file, with the given id.
pub fn case(file: &str, id: &str) -> Value {
    vectors(file)["cases"].as_array().unwrap().iter().find(|c| c["id"] == id).cloned().unwrap_or_else(|| panic!("no case {id}"))
}

/// A parsed HTTP/1.1 message: request line or status line, header lines in order, body.
pub struct Message {
    pub method: Option<Method>,
    pub uri: Option<Uri>,
    pub status: Option<StatusCode>,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Parses the vectors' message text (`\n` line ends, blank line before the body).
pub fn parse_message(text: &str) -> Message {
    let (head, body) = text.split_once("\n\n").unwrap_or((text, ""));
    let mut lines = head.lines();
    let first = lines.next().unwrap();
    let mut parts = first.split(' ');
    let (a, b) = (parts.next().unwrap(), parts.next().unwrap());
    let (method, uri, status) =
        if a.starts_with("HTTP/") { (None, None, Some(b.parse().unwrap())) } else { (Some(a.parse().unwrap()), Some(b.parse().unwrap()), None) };
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers.append(HeaderName::from_bytes(name.trim().as_bytes()).unwrap(), HeaderValue::from_str(value.trim()).unwrap());
    }
    Message { method, uri, status, headers, body: Bytes::copy_from_slice(body.as_bytes()) }
}

/// The RFC 9421 test key, by name, as its JWK.
pub fn key_jwk(name: &str) -> Value {
    vectors("rfc9421-keys.json")["keys"][name]["jwk"].clone()
}

/// The Ed25519 test key pair (B.1.4).
pub fn ed25519_signing_key() -> ed25519_dalek::SigningKey {
    use base64::Engine;
    let d = key_jwk("test-key-ed25519")["d"].as_str().unwrap().to_owned();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(d).unwrap();
    ed25519_dalek::SigningKey::from_bytes(&bytes.try_into().unwrap())
}
