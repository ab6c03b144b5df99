//! The gateway's parsers of untrusted bytes, compiled from the very source files of the main
//! crate without the rest of the gateway, so a sanitizer build takes a minute or two instead of
//! compiling TLS, Rego's whole interpreter and Redis clients:
//!
//! - `src/signature/{error,parse,base,jwk}.rs`: `Signature-Input`, `Signature`,
//!   `Signature-Agent`, the signature base and JWKs (http, sfv, url, base64, ed25519-dalek,
//!   sha2, serde_json, thiserror);
//! - `src/digest.rs`: `Content-Digest` (http, sfv, sha2, thiserror);
//! - `src/mcp.rs`: the JSON-RPC body and the MCP transport headers (http, bytes, base64,
//!   serde_json, thiserror);
//! - `src/oauth/compact.rs`: `Authorization: Bearer` and the JWS compact form of a JWT (http,
//!   base64, serde, serde_json, thiserror);
//! - `src/oauth/documents.rs`: the issuer's JWK Set, its `Cache-Control` and its metadata's
//!   `jwks_uri` (jsonwebtoken without a crypto backend: building a key from its components
//!   does no cryptography, url, serde);
//! - `src/directory/document.rs`: an agent's key directory and its `Cache-Control` (the JWK
//!   code above, tracing);
//! - `src/policy/convert.rs`: JSON to a policy value (regorus, only as much of it as its
//!   `Value` needs);
//! - `src/target.rs`: the request target's authority, `Host` and paths (http, url).
//!
//! Each is mounted at the same path as in the main crate, so its `crate::`/`super::` imports
//! resolve here too. If any of them ever imports more of the crate, split the pure parsing out
//! again (as `document.rs`/`documents.rs` were split from their fetches) or depend on
//! `portcullis = { path = ".." }`, whose sanitizer build compiles the whole gateway.

#[path = "../../src/digest.rs"]
pub mod digest;
pub mod directory;
#[path = "../../src/mcp.rs"]
pub mod mcp;
pub mod oauth;
pub mod policy;
pub mod signature;
#[path = "../../src/target.rs"]
pub mod target;

/// A fuzz input read as leading `name: value` header lines, a blank line, then the body (the
/// `mcp_parse` and `content_digest` targets). A line that is not a valid header ends the
/// headers there.
pub fn split_headers(data: &[u8]) -> (http::HeaderMap, &[u8]) {
    let mut headers = http::HeaderMap::new();
    let mut rest = data;
    while let Some(end) = rest.iter().position(|b| *b == b'\n') {
        let line = rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]);
        if line.is_empty() {
            return (headers, &rest[end + 1..]);
        }
        let Some(colon) = line.iter().position(|b| *b == b':') else { break };
        let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(&line[..colon]), http::HeaderValue::from_bytes(line[colon + 1..].trim_ascii_start())) else {
            break;
        };
        headers.append(name, value);
        rest = &rest[end + 1..];
    }
    (headers, rest)
}
