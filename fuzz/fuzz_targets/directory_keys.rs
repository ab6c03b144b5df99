//! An agent's key directory document and its `Cache-Control` (untrusted bytes from any HTTPS
//! origin a request names). Input: optional leading `cache-control: value` lines (name in any
//! case), then the body. A bare JSON body is thus a valid input.
//! Invariants: the document is refused as malformed exactly when it is not JSON or has no
//! `"keys"` array, and for too many keys exactly when the array is longer than the cap; a
//! malformed refusal's text is short (never the body); every kept key is indexed by its own
//! RFC 7638 thumbprint (never the entry's `kid`), comes from a public OKP/Ed25519 entry with
//! its `x`, and carries that entry's integer `nbf`/`exp`; every plain public Ed25519 entry is
//! kept. `max-age` is only ever read from a `max-age`, `no-store` or `no-cache` directive.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use portcullis_wire::key_directory::{parse_key_set, parse_max_age, ParseError, MAX_DIRECTORY_KEYS};
use portcullis_wire::signature::ed25519_thumbprint;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut body = data;
    while let Some(end) = body.iter().position(|b| *b == b'\n') {
        let Some(value) = body[..end].strip_prefix(b"cache-control:").or_else(|| body[..end].strip_prefix(b"Cache-Control:")) else { break };
        if let Ok(value) = std::str::from_utf8(value) {
            check_max_age(value);
        }
        body = &body[end + 1..];
    }
    let doc: Result<Value, _> = serde_json::from_slice(body);
    let entries = doc.as_ref().ok().and_then(|d| d.get("keys")).and_then(Value::as_array);
    let set = match parse_key_set(body) {
        Ok(set) => set,
        Err(ParseError::Malformed(reason)) => {
            assert!(entries.is_none(), "refused a document with a keys array: {reason}");
            assert!(reason.len() < 100, "{reason:?}");
            return;
        }
        Err(ParseError::TooManyKeys) => {
            assert!(entries.is_some_and(|e| e.len() > MAX_DIRECTORY_KEYS));
            return;
        }
    };
    let entries = entries.expect("accepted a document without a keys array");
    assert!(entries.len() <= MAX_DIRECTORY_KEYS);
    assert!(set.len() <= entries.len());
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    for (thumbprint, dk) in &set {
        assert_eq!(thumbprint, &ed25519_thumbprint(&dk.key), "a key indexed by something else than its thumbprint");
        let x = b64.encode(dk.key.as_bytes());
        let from = |e: &&Value| {
            let text = |name: &str| e.get(name).and_then(Value::as_str);
            let time = |name: &str| match e.get(name) {
                None | Some(Value::Null) => Some(None),
                Some(v) => v.as_u64().map(Some),
            };
            text("kty") == Some("OKP")
                && text("crv") == Some("Ed25519")
                && e.get("d").is_none()
                && text("x").and_then(|s| b64.decode(s.trim_end_matches('=')).ok()).is_some_and(|b| b64.encode(b) == x)
                && time("nbf") == Some(dk.nbf)
                && time("exp") == Some(dk.exp)
        };
        assert!(entries.iter().any(|e| from(&e)), "a kept key that no public Ed25519 entry gave");
    }
    for e in entries {
        let Some(obj) = e.as_object() else { continue };
        let plain = obj.len() <= 4
            && obj.keys().all(|k| ["kty", "crv", "x", "kid"].contains(&k.as_str()))
            && obj.get("kty").and_then(Value::as_str) == Some("OKP")
            && obj.get("crv").and_then(Value::as_str) == Some("Ed25519");
        let Some(x) = obj.get("x").and_then(Value::as_str).filter(|_| plain) else { continue };
        let Ok(bytes) = b64.decode(x) else { continue };
        let Ok(bytes) = <[u8; 32]>::try_from(bytes) else { continue };
        let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(&bytes) else { continue };
        assert!(set.contains_key(&ed25519_thumbprint(&key)), "dropped a plain public Ed25519 key");
    }
});

fn check_max_age(value: &str) {
    let Some(age) = parse_max_age(value) else { return };
    let lower = value.to_ascii_lowercase();
    if age.is_zero() && (lower.contains("no-store") || lower.contains("no-cache")) {
        return;
    }
    assert!(lower.contains("max-age"), "{value:?} gave {age:?}");
    assert!(age.as_secs().to_string().len() <= value.len());
}
