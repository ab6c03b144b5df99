//! The signature stage (docs/design.md stages 3 and 5): the configured Web Bot Auth rules,
//! then Ed25519 over the signature base. The bytes — parsing the fields, building the base,
//! JWK thumbprints, the agent-side signer — are `portcullis_wire::signature`; this module adds
//! the gateway's rules on top.
//!
//! - [`verify`]: the profile and configuration rules, then Ed25519 over the base. Key resolution
//!   (stage 4) happens between [`SignatureVerifier::prepare`] and [`PendingSignature::verify`],
//!   in `directory`.
//!
//! Nothing here trusts the request: a signature is attributed to an agent only through a key
//! the caller resolved, and only [`PendingSignature::verify`] makes a [`VerifiedSignature`].

pub mod verify;

pub use portcullis_wire::signature::{
    ed25519_public_jwk, ed25519_thumbprint, jwk_thumbprint, shown_alg, shown_keyid, shown_name, verifying_key_from_jwk, AgentForm, AgentKind, AgentRef,
    BaseError, JwkError, Nonce, SignError, SignatureError, Signer, MAX_SHOWN_NAME,
};
pub use verify::{PendingSignature, SignatureVerifier, VerifiedSignature};

#[cfg(test)]
mod signer_tests;
#[cfg(test)]
mod test_support;
