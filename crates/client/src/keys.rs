//! Agent key files: `portcullis keygen` writes an Ed25519 key pair as a private JWK (mode
//! 0600) and the public key directory document; [`load_private_jwk`] reads the JWK back.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use ed25519_dalek::SigningKey;
use serde_json::Value;

use portcullis_wire::signature::{ed25519_public_jwk, ed25519_thumbprint};

/// The file name of the private key `keygen` writes.
pub const PRIVATE_KEY_FILE: &str = "agent.jwk";
/// Where agents publish their key directory (relative to the origin, and to `keygen --out`).
pub const DIRECTORY_PATH: &str = ".well-known/http-message-signatures-directory";
/// The media type a key directory must be served with.
pub const DIRECTORY_MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";

/// Why a key could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The private key file exists already; keygen never overwrites a key.
    #[error("{0} exists already; refusing to overwrite a private key")]
    AlreadyExists(PathBuf),
    /// A file or folder could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The key file is not a private OKP/Ed25519 JWK (the detail never includes key bytes).
    #[error("{path} is not a private Ed25519 JWK: {detail}")]
    NotAPrivateKey {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
}

/// What `keygen` wrote.
#[derive(Debug, Clone)]
pub struct GeneratedKey {
    /// The RFC 7638 thumbprint: the `keyid` signatures carry.
    pub keyid: String,
    /// The private JWK (mode 0600).
    pub private_key: PathBuf,
    /// The directory document, to serve at `/.well-known/http-message-signatures-directory`.
    pub directory: PathBuf,
    /// The public key's `x` (RFC 8037, base64url): what a static `[[signatures.keys]]` entry needs.
    pub public_x: String,
}

/// The private JWK of `key` (RFC 8037), with `kid` set to its thumbprint.
pub fn private_jwk(key: &SigningKey) -> Value {
    let mut jwk = ed25519_public_jwk(&key.verifying_key());
    if let Some(obj) = jwk.as_object_mut() {
        obj.insert("d".to_owned(), Value::String(B64URL.encode(key.to_bytes())));
    }
    jwk
}

/// The key directory document (`{"keys": [...]}`) publishing the public halves of `keys`.
pub fn directory_document(keys: &[&SigningKey]) -> Value {
    serde_json::json!({ "keys": keys.iter().map(|k| ed25519_public_jwk(&k.verifying_key())).collect::<Vec<_>>() })
}

/// Generates a key pair under `out`: `out/agent.jwk` (private, mode 0600) and
/// `out/.well-known/http-message-signatures-directory` (public), so serving `out` as a web
/// root publishes the directory. Refuses to overwrite an existing `agent.jwk`.
pub fn keygen(out: &Path) -> Result<GeneratedKey, KeyError> {
    let key = SigningKey::from_bytes(&rand::random());
    let private_key = out.join(PRIVATE_KEY_FILE);
    let directory = out.join(DIRECTORY_PATH);
    if private_key.exists() {
        return Err(KeyError::AlreadyExists(private_key));
    }
    if let Some(parent) = directory.parent() {
        std::fs::create_dir_all(parent).map_err(|source| KeyError::Write { path: parent.to_owned(), source })?;
    }
    write_private(&private_key, &format!("{:#}\n", private_jwk(&key)))?;
    let doc = format!("{:#}\n", directory_document(&[&key]));
    std::fs::write(&directory, doc).map_err(|source| KeyError::Write { path: directory.clone(), source })?;
    let public_x = ed25519_public_jwk(&key.verifying_key())["x"].as_str().unwrap_or_default().to_owned();
    Ok(GeneratedKey { keyid: ed25519_thumbprint(&key.verifying_key()), private_key, directory, public_x })
}

fn write_private(path: &Path, text: &str) -> Result<(), KeyError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let err = |source| KeyError::Write { path: path.to_owned(), source };
    let mut f = options.open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

/// Reads a private OKP/Ed25519 JWK (as `keygen` writes it). Checks that `x`, when present,
/// is the public half of `d`.
pub fn load_private_jwk(path: &Path) -> Result<SigningKey, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read { path: path.to_owned(), source })?;
    let bad = |detail: &str| KeyError::NotAPrivateKey { path: path.to_owned(), detail: detail.to_owned() };
    let jwk: Value = serde_json::from_str(&text).map_err(|_| bad("not JSON"))?;
    if jwk.get("kty").and_then(Value::as_str) != Some("OKP") || jwk.get("crv").and_then(Value::as_str) != Some("Ed25519") {
        return Err(bad("kty must be OKP and crv Ed25519"));
    }
    let d = jwk.get("d").and_then(Value::as_str).ok_or_else(|| bad("no private member d"))?;
    let d = B64URL.decode(d).map_err(|_| bad("d is not base64url"))?;
    let bytes: [u8; 32] = d.as_slice().try_into().map_err(|_| bad("d is not 32 bytes"))?;
    let key = SigningKey::from_bytes(&bytes);
    if let Some(x) = jwk.get("x").and_then(Value::as_str) {
        if x != B64URL.encode(key.verifying_key().as_bytes()) {
            return Err(bad("x is not the public half of d"));
        }
    }
    Ok(key)
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
