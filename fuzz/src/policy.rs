//! `src/policy/convert.rs`, mounted as in the main crate.

#[path = "../../src/policy/convert.rs"]
pub mod convert;
