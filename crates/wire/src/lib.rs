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
//! - [`dpop`]: RFC 9449 DPoP proofs: the `DPoP` field, the proof JWT, its signature and its
//!   checks against the request (the resource server's side), and the agent's EdDSA proofs.
//! - [`jose`]: `Authorization: Bearer` and the JWS compact form of a JWT.
//! - [`key_directory`], [`issuer_documents`]: an agent's key directory and an issuer's JWK Set
//!   and metadata, with their `Cache-Control`.
//! - [`mcp`]: the MCP JSON-RPC body and transport headers.
//! - [`sse`], [`tool_list`]: server-sent events, and an MCP server's answers to the gateway's
//!   own catalog requests (`tools/list` pages).
//! - [`target`]: the request target's authority, `Host` and paths.
//! - [`time`]: the request's one clock reading.
//! - `rego_value` (feature `rego`): JSON → policy value, literal.

pub mod digest;
pub mod dpop;
pub mod fields;
pub mod issuer_documents;
pub mod jose;
pub mod key_directory;
pub mod mcp;
#[cfg(feature = "rego")]
pub mod rego_value;
pub mod signature;
pub mod sse;
pub mod target;
#[cfg(any(test, feature = "test-vectors"))]
pub mod test_vectors;
pub mod time;
pub mod tool_list;

pub use time::UnixTime;

/// `e` and every `source()` under it, joined with ": " (each cause once, even when a wrapper
/// repeats its source's text): "error sending request for url (…): client error (Connect):
/// tcp connect error: Connection refused (os error 111)". For messages a person acts on.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod error_chain_tests {
    #[test]
    fn every_cause_is_named_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let outer = std::io::Error::other(io);
        assert_eq!(super::error_chain(&outer), "Connection refused");
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("error sending request")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrap(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)"));
        assert_eq!(super::error_chain(&e), "error sending request: Connection refused (os error 111)");
    }
}
