//! `src/directory/document.rs`, mounted as in the main crate.

#[path = "../../src/directory/document.rs"]
pub mod document;
