//! Parsing one key directory document and its `Cache-Control` (WBA "Directory Format"): pure
//! functions over the bytes an agent's directory sent, the fetch is the gateway's
//! (`directory/fetch.rs`).

use std::collections::HashMap;
use std::time::Duration;

use ed25519_dalek::VerifyingKey;
use serde_json::Value;

use crate::signature::{ed25519_thumbprint, verifying_key_from_jwk};

/// Most keys a directory may list (WBA "SSRF": key-count cap).
pub const MAX_DIRECTORY_KEYS: usize = 64;

/// One usable key of a directory, with its validity window (docs/design.md decision 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryKey {
    /// The Ed25519 public key.
    pub key: VerifyingKey,
    /// `nbf`, Unix seconds: not to be used before.
    pub nbf: Option<u64>,
    /// `exp`, Unix seconds: not to be used from then on.
    pub exp: Option<u64>,
}

/// The usable keys of a directory, by RFC 7638 thumbprint (computed here, never `kid`).
pub type KeySet = HashMap<String, DirectoryKey>;

/// Why a document is not a usable JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON, or not `{"keys": [...]}`.
    Malformed(String),
    /// More entries than [`MAX_DIRECTORY_KEYS`].
    TooManyKeys,
}

/// Parses a JWKS (RFC 7517 §5) into its usable Ed25519 keys by computed thumbprint. Entries
/// that are not usable public Ed25519 signing keys, or whose `nbf`/`exp` are not integers,
/// are dropped (WBA "Directory Format": validate and drop malformed entries).
pub fn parse_key_set(body: &[u8]) -> Result<KeySet, ParseError> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| ParseError::Malformed(json_error_text(&e)))?;
    let keys = doc.get("keys").and_then(Value::as_array).ok_or_else(|| ParseError::Malformed("no \"keys\" array".to_owned()))?;
    if keys.len() > MAX_DIRECTORY_KEYS {
        return Err(ParseError::TooManyKeys);
    }
    let mut out = KeySet::with_capacity(keys.len());
    for jwk in keys {
        let key = match verifying_key_from_jwk(jwk) {
            Ok(k) => k,
            Err(e) => {
                tracing::debug!(error = %e, "Dropping unusable directory key");
                continue;
            }
        };
        let (Ok(nbf), Ok(exp)) = (time_member(jwk, "nbf"), time_member(jwk, "exp")) else {
            tracing::debug!("Dropping directory key with a non-integer nbf/exp");
            continue;
        };
        out.insert(ed25519_thumbprint(&key), DirectoryKey { key, nbf, exp });
    }
    Ok(out)
}

/// A JSON error as a refusal may say it: serde_json's fixed syntax texts with a position, never
/// its type errors, which quote the document's strings (the document may be anyone's upload).
fn json_error_text(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof => format!("not JSON: {e}"),
        Category::Data | Category::Io => format!("not JSON: unreadable at line {} column {}", e.line(), e.column()),
    }
}

fn time_member(jwk: &Value, name: &str) -> Result<Option<u64>, ()> {
    match jwk.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(()),
    }
}

/// `max-age` of a `Cache-Control` value (RFC 9111 §5.2.2.1); `no-store` and `no-cache` count
/// as zero (the caller clamps to `directory_min_ttl`).
pub fn parse_max_age(value: &str) -> Option<Duration> {
    let mut out = None;
    for directive in value.split(',') {
        let (name, arg) = match directive.split_once('=') {
            Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
            None => (directive.trim(), None),
        };
        match (name.to_ascii_lowercase().as_str(), arg) {
            ("no-store" | "no-cache", _) => return Some(Duration::ZERO),
            ("max-age", Some(a)) => out = a.parse::<u64>().ok().map(Duration::from_secs).or(out),
            _ => {}
        }
    }
    out
}
