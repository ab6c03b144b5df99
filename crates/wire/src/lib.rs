//! What crosses the wire, parsed and built without I/O: the bottom of Portcullis's crate graph.
//!
//! Every function here is pure over bytes a peer sent (an agent, a key directory, an issuer)
//! and trusts none of them; each parser has a fuzz target in `fuzz/`, which depends on this
//! crate as it is. Nothing here reads the clock on its own, opens a socket or needs a runtime:
//! the gateway (`portcullis`) and the agent library (`portcullis-client`) do that on top.
//!
//! - [`signature`]: RFC 9421 `Signature-Input`/`Signature`/`Signature-Agent`, the signature
//!   base, RFC 7638 JWK thumbprints, and the agent-side [`signature::Signer`].
//! - [`digest`]: RFC 9530 `Content-Digest`.
//! - [`jose`]: `Authorization: Bearer` and the JWS compact form of a JWT.
//! - [`key_directory`], [`issuer_documents`]: an agent's key directory and an issuer's JWK Set
//!   and metadata, with their `Cache-Control`.
//! - [`mcp`]: the MCP JSON-RPC body and transport headers.
//! - [`target`]: the request target's authority, `Host` and paths.
//! - [`time`]: the request's one clock reading.
//! - `rego_value` (feature `rego`): JSON → policy value, literal.

pub mod digest;
pub mod fields;
pub mod issuer_documents;
pub mod jose;
pub mod key_directory;
pub mod mcp;
#[cfg(feature = "rego")]
pub mod rego_value;
pub mod signature;
pub mod target;
#[cfg(any(test, feature = "test-vectors"))]
pub mod test_vectors;
pub mod time;

pub use time::UnixTime;
