//! `src/oauth/{compact,documents}.rs`, mounted as in the main crate.

#[path = "../../src/oauth/compact.rs"]
pub mod compact;
// `KeySet::ttl` is read only by the cache in `jwks.rs`.
#[allow(dead_code)]
#[path = "../../src/oauth/documents.rs"]
pub mod documents;

/// `src/oauth/mod.rs`'s `short`, the one item of that file `documents.rs` uses (the rest of
/// `mod.rs` needs the whole gateway): a value cut to 64 characters for an error text.
pub(crate) fn short(s: &str) -> String {
    s.chars().take(64).collect()
}
