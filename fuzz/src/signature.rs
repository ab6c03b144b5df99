//! `src/signature/{error,parse,base,jwk}.rs`, mounted as in the main crate.

#[path = "../../src/signature/base.rs"]
pub mod base;
#[path = "../../src/signature/error.rs"]
pub mod error;
#[path = "../../src/signature/jwk.rs"]
pub mod jwk;
#[path = "../../src/signature/parse.rs"]
pub mod parse;

pub use error::{BaseError, SignatureError};
pub use jwk::{ed25519_thumbprint, verifying_key_from_jwk, JwkError};
pub use parse::{AgentForm, AgentKind, AgentRef};
