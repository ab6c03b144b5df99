//! Test helpers for the signature stage: requests as the stage sees them, built from the
//! standards vectors (`portcullis_wire::test_vectors`) or by hand, and `[signatures]` settings.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use crate::config::{HumanDuration, RawSignatures};
use crate::inbound::Inbound;
pub use portcullis_wire::test_vectors::{case, ed25519_signing_key, parse_message};
use portcullis_wire::UnixTime;

/// An `Inbound` for a request message, at `now` seconds.
pub(crate) fn inbound(text: &str, now: u64, is_tls: bool) -> Inbound {
    let m = parse_message(text);
    let mut req = http::Request::builder().method(m.method.unwrap()).uri(m.uri.unwrap()).body(()).unwrap();
    *req.headers_mut() = m.headers;
    let (head, ()) = req.into_parts();
    let authority = portcullis_wire::target::authority(&head, is_tls).unwrap_or_default();
    Inbound {
        head,
        body: m.body,
        now: UnixTime(Duration::from_secs(now)),
        peer: std::net::SocketAddr::from(([127, 0, 0, 1], 1)).into(),
        is_tls,
        request_id: "test".to_owned(),
        authority,
    }
}

/// `[signatures]` defaults for a gateway that is every host the vectors and tests address.
pub(crate) fn raw_signatures() -> RawSignatures {
    RawSignatures { authority: ["example.com", "example.org", "mcp.example.com"].map(String::from).to_vec(), ..RawSignatures::default() }
}

/// [`raw_signatures`] with the given components and a max age (seconds).
pub(crate) fn config(components: &[&str], max_age: u64) -> RawSignatures {
    RawSignatures { components: components.iter().map(|c| (*c).to_owned()).collect(), max_age: HumanDuration(Duration::from_secs(max_age)), ..raw_signatures() }
}

/// An `Inbound` from a built request (body included), at `now` seconds, over TLS.
pub(crate) fn inbound_from(req: http::Request<Vec<u8>>, now: u64) -> Inbound {
    let (head, body) = req.into_parts();
    Inbound {
        authority: portcullis_wire::target::authority(&head, true).unwrap_or_default(),
        head,
        body: Bytes::from(body),
        now: UnixTime(Duration::from_secs(now)),
        peer: std::net::SocketAddr::from(([127, 0, 0, 1], 1)).into(),
        is_tls: true,
        request_id: "test".to_owned(),
    }
}

/// A typical MCP POST to `https://mcp.example.com/mcp` (Host header, origin-form URI).
pub(crate) fn mcp_post(body: &str) -> http::Request<Vec<u8>> {
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
pub(crate) fn edit_header(req: &mut Inbound, name: &str, from: &str, to: &str) {
    let v = req.head.headers.get(name).unwrap().to_str().unwrap().replace(from, to);
    req.head.headers.insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap());
}
