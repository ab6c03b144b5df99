//! `src/signature/{error,parse,base}.rs`, mounted as in the main crate.

#[path = "../../src/signature/base.rs"]
pub mod base;
#[path = "../../src/signature/error.rs"]
pub mod error;
#[path = "../../src/signature/parse.rs"]
pub mod parse;

pub use error::{BaseError, SignatureError};
pub use parse::{AgentForm, AgentKind, AgentRef};
