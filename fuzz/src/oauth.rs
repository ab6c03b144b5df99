//! `src/oauth/compact.rs`, mounted as in the main crate.

#[path = "../../src/oauth/compact.rs"]
pub mod compact;
