//! The gateway's parsers of untrusted bytes, compiled from the very source files of the main
//! crate without the rest of the gateway, so a sanitizer build takes a minute instead of
//! compiling TLS, Rego and Redis clients:
//!
//! - `src/signature/{error,parse,base}.rs`: `Signature-Input`, `Signature`, `Signature-Agent`
//!   and the signature base (http, sfv, url, base64, thiserror);
//! - `src/mcp.rs`: the JSON-RPC body and the MCP transport headers (http, bytes, base64,
//!   serde_json, thiserror);
//! - `src/oauth/compact.rs`: `Authorization: Bearer` and the JWS compact form of a JWT (http,
//!   base64, serde, serde_json, thiserror).
//!
//! If any of them ever imports more of the crate, depend on `portcullis = { path = ".." }`
//! instead.

#[path = "../../src/mcp.rs"]
pub mod mcp;
pub mod oauth;
pub mod signature;
