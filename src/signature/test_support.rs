//! Test helpers: the standards vectors (read at test time from `tests/vectors/`) and a small
//! parser for the HTTP/1.1 message text they carry.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use serde_json::Value;

use crate::config::{HumanDuration, RawSignatures};
use crate::pipeline::{Inbound, UnixTime};

/// Loads `tests/vectors/<file>` (see its README for each file's source).
pub fn vectors(file: &str) -> Value {
    let path = format!("{}/tests/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
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

/// An `Inbound` for a request message, at `now` seconds.
pub fn inbound(text: &str, now: u64, is_tls: bool) -> Inbound {
    let m = parse_message(text);
    let mut req = http::Request::builder().method(m.method.unwrap()).uri(m.uri.unwrap()).body(()).unwrap();
    *req.headers_mut() = m.headers;
    let (head, ()) = req.into_parts();
    let authority = crate::target::authority(&head, is_tls).unwrap_or_default();
    Inbound { head, body: m.body, now: UnixTime(Duration::from_secs(now)), peer: ([127, 0, 0, 1], 1).into(), is_tls, request_id: "test".to_owned(), authority }
}

/// `[signatures]` defaults for a gateway that is every host the vectors and tests address.
pub fn raw_signatures() -> RawSignatures {
    RawSignatures { authority: ["example.com", "example.org", "mcp.example.com"].map(String::from).to_vec(), ..RawSignatures::default() }
}

/// [`raw_signatures`] with the given components and a max age (seconds).
pub fn config(components: &[&str], max_age: u64) -> RawSignatures {
    RawSignatures { components: components.iter().map(|c| (*c).to_owned()).collect(), max_age: HumanDuration(Duration::from_secs(max_age)), ..raw_signatures() }
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

/// An `Inbound` from a built request (body included), at `now` seconds, over TLS.
pub fn inbound_from(req: http::Request<Vec<u8>>, now: u64) -> Inbound {
    let (head, body) = req.into_parts();
    Inbound {
        authority: crate::target::authority(&head, true).unwrap_or_default(),
        head,
        body: Bytes::from(body),
        now: UnixTime(Duration::from_secs(now)),
        peer: ([127, 0, 0, 1], 1).into(),
        is_tls: true,
        request_id: "test".to_owned(),
    }
}

/// A typical MCP POST to `https://mcp.example.com/mcp` (Host header, origin-form URI).
pub fn mcp_post(body: &str) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "mcp.example.com")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.as_bytes().to_vec())
        .unwrap()
}

/// Replaces `from` with `to` in the single value of header `name`.
pub fn edit_header(req: &mut Inbound, name: &str, from: &str, to: &str) {
    let v = req.head.headers.get(name).unwrap().to_str().unwrap().replace(from, to);
    req.head.headers.insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap());
}
