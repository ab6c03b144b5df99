//! HTTP Message Signatures (RFC 9421) in the Web Bot Auth profile: pipeline stages 3 and 5.
//!
//! - [`parse`]: `Signature-Input`, `Signature`, `Signature-Agent` as structured fields.
//! - [`base`]: the signature base, byte for byte (RFC 9421 §2.5).
//! - [`verify`]: the profile and configuration rules, then Ed25519 over the base. Key resolution
//!   (stage 4) happens between [`SignatureVerifier::prepare`] and [`PendingSignature::verify`],
//!   in `directory`.
//! - [`jwk`]: RFC 7638 thumbprints (`keyid`) and Ed25519 JWKs.
//! - [`signer`]: the agent side, for tests, benches and the CLI.
//!
//! Nothing here trusts the request: a signature is attributed to an agent only through a key
//! the caller resolved, and only [`PendingSignature::verify`] makes a [`VerifiedSignature`].

pub mod base;
mod error;
pub mod jwk;
pub mod parse;
pub mod signer;
pub mod verify;

pub use error::{shown_alg, shown_keyid, shown_name, BaseError, SignatureError, MAX_SHOWN_NAME};
pub use jwk::{ed25519_public_jwk, ed25519_thumbprint, jwk_thumbprint, verifying_key_from_jwk, JwkError};
pub use parse::{AgentForm, AgentKind, AgentRef};
pub use signer::{Nonce, SignError, Signer};
pub use verify::{PendingSignature, SignatureVerifier, VerifiedSignature};

#[cfg(test)]
mod test_support;
