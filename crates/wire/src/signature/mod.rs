//! HTTP Message Signatures (RFC 9421) in the Web Bot Auth profile, as bytes.
//!
//! - [`parse`]: `Signature-Input`, `Signature`, `Signature-Agent` as structured fields.
//! - [`base`]: the signature base, byte for byte (RFC 9421 §2.5).
//! - [`component`]: the components a verifier may require, typed.
//! - [`jwk`]: RFC 7638 thumbprints (`keyid`) and Ed25519 JWKs.
//! - [`signer`]: the agent side, for the agent library, tests, benches and the CLI.
//!
//! The gateway's signature stage (its configured rules, key resolution, Ed25519 verification)
//! is built on these in `portcullis::signature`.

pub mod base;
pub mod component;
mod error;
pub mod jwk;
pub mod parse;
pub mod signer;

pub use component::Component;
pub use error::{shown_alg, shown_keyid, shown_name, BaseError, SignatureError, MAX_COVERED, MAX_SHOWN_NAME};
pub use jwk::{ed25519_public_jwk, ed25519_thumbprint, jwk_thumbprint, verifying_key_from_jwk, JwkError};
pub use parse::{AgentForm, AgentKind, AgentRef};
pub use signer::{Nonce, SignError, Signer};
