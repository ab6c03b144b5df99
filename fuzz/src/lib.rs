//! Shared by the fuzz targets. The parsers they drive are `portcullis-wire`'s, a normal
//! dependency: that crate is the gateway's parsing of untrusted bytes with no I/O and no
//! runtime (no TLS, no Rego interpreter, no Redis client), so a sanitizer build of it takes a
//! minute or two. The targets name its modules directly: `digest`, `mcp`, `target`,
//! `signature::{parse, base, jwk}`, `jose`, `issuer_documents`, `key_directory`, `rego_value`.

/// A fuzz input read as leading `name: value` header lines, a blank line, then the body (the
/// `mcp_parse` and `content_digest` targets); the gateway's refusal-text test reads the corpora
/// with the same function.
pub use portcullis_wire::test_vectors::split_headers;
