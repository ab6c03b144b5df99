//! What `portcullis demo` and `portcullis example-backend` put around a gateway, on
//! 127.0.0.1. One copy of each, which `portcullis-test-support` re-exports under the same
//! paths for the gateway's tests, benches and the load driver:
//!
//! - [`pki`]: a CA made at run time (rcgen), leaf certificates, a rustls server config, a
//!   reqwest client trusting only the CA, and a small HTTPS server.
//! - [`directory`]: an agent's Web Bot Auth key directory over HTTPS.
//! - [`issuer`] and [`keys`]: an OAuth authorization server over HTTPS (RFC 8414 metadata,
//!   JWKS, RFC 7662 introspection) and its RSA, EC and Ed25519 signing keys.
//! - [`backend`]: the example MCP server of the demo, the compose file and the load bench.
//! - [`browser`]: just enough of a browser for the approval page (redirects, cookies).
//!
//! This crate never depends on the gateway. Constructors that the demo calls have a fallible
//! form (`try_*`, returning [`Error`]); the tests use the panicking conveniences beside them.
// The panicking conveniences (for tests and benches) panic on purpose, with the reason in the
// message; the demo calls only the fallible forms.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod backend;
pub mod browser;
pub mod directory;
pub mod issuer;
pub mod keys;
pub mod pki;

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

/// The response body type every server here answers with.
pub type Body = BoxBody<Bytes, Infallible>;

/// A complete response body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// Why a piece of the outside world could not be made or started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No local port could be bound, or a temp file written.
    #[error("cannot listen on 127.0.0.1 or write a temp file: {0}")]
    Io(#[from] std::io::Error),
    /// rcgen refused to make a key or certificate.
    #[error("cannot make the {what}: {source}")]
    Certificate {
        /// The CA or the server certificate.
        what: &'static str,
        /// What rcgen said.
        source: rcgen::Error,
    },
    /// rustls refused the generated certificate or key.
    #[error("cannot build the TLS server config: {0}")]
    Tls(String),
    /// A signing key could not be made or a token signed.
    #[error("cannot make a signing key or sign a token: {0}")]
    Key(String),
}
