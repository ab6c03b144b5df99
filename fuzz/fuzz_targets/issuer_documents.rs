//! The token issuer's documents (bytes from the issuer's HTTPS endpoints): the JWK Set with its
//! `Cache-Control`, and the RFC 8414 metadata whose `jwks_uri` names it. Input: optional leading
//! `cache-control: value` lines (name in any case), then the body, read both as a JWK Set and
//! as metadata for the issuer `https://issuer.example`. A bare JSON body is a valid input.
//! Invariants: a JWK Set is accepted only as a JSON object with a `"keys"` array; every kept
//! key comes from an entry of its kind (`RSA`, `EC`/`P-256`, `OKP`/`Ed25519`) with its `kid`,
//! not marked for another use than `sig`, and is found again by its kid; the key set's lifetime
//! is always within [MIN_TTL, MAX_TTL]. Metadata is accepted only as a JSON object whose
//! `issuer` is exactly the configured one and whose `jwks_uri` is an https URL, returned as
//! parsed; a refusal for another issuer quotes at most 64 characters of it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_wire::issuer_documents::{jwks_uri_of, ttl_from_cache_control, KeyKind, KeySet, DEFAULT_TTL, MAX_TTL, MIN_TTL};
use serde_json::Value;

const ISSUER: &str = "https://issuer.example";

fuzz_target!(|data: &[u8]| {
    let mut body = data;
    while let Some(end) = body.iter().position(|b| *b == b'\n') {
        let Some(value) = body[..end].strip_prefix(b"cache-control:").or_else(|| body[..end].strip_prefix(b"Cache-Control:")) else { break };
        if let Ok(value) = std::str::from_utf8(value) {
            let ttl = ttl_from_cache_control(Some(value));
            assert!((MIN_TTL..=MAX_TTL).contains(&ttl), "{value:?} gave {ttl:?}");
        }
        body = &body[end + 1..];
    }
    assert_eq!(ttl_from_cache_control(None), DEFAULT_TTL);
    let doc: Option<Value> = serde_json::from_slice(body).ok();
    check_key_set(doc.as_ref(), body);
    check_metadata(doc.as_ref(), body);
});

fn check_key_set(doc: Option<&Value>, body: &[u8]) {
    let Ok(set) = KeySet::parse(body, DEFAULT_TTL) else { return };
    let entries = doc.and_then(|d| d.as_object()).and_then(|o| o.get("keys")).and_then(Value::as_array);
    let entries = entries.unwrap_or_else(|| panic!("accepted a JWK Set that is not an object with a keys array: {doc:?}"));
    let mut kept = 0;
    for (kind, kty, crv) in [(KeyKind::Rsa, "RSA", None), (KeyKind::EcP256, "EC", Some("P-256")), (KeyKind::Ed25519, "OKP", Some("Ed25519"))] {
        for key in set.candidates(None, kind) {
            kept += 1;
            assert_eq!(key.kind, kind);
            let from = |e: &&Value| {
                let text = |name: &str| e.get(name).and_then(Value::as_str);
                text("kty") == Some(kty)
                    && crv.is_none_or(|c| text("crv") == Some(c))
                    && text("kid") == key.kid.as_deref()
                    && e.get("use").is_none_or(|u| u.is_null() || u.as_str() == Some("sig"))
            };
            assert!(entries.iter().any(|e| from(&e)), "a kept {kind:?} key that no entry of its kind gave");
            if let Some(kid) = &key.kid {
                assert!(set.has_kid(kid));
                assert!(set.candidates(Some(kid), kind).iter().all(|k| k.kid.as_deref() == Some(kid.as_str())));
            }
        }
    }
    assert!(kept <= entries.len());
}

fn check_metadata(doc: Option<&Value>, body: &[u8]) {
    match jwks_uri_of(ISSUER, body) {
        Ok(url) => {
            let obj = doc.and_then(Value::as_object).unwrap_or_else(|| panic!("accepted metadata that is not an object: {doc:?}"));
            assert_eq!(obj.get("issuer").and_then(Value::as_str), Some(ISSUER));
            let uri = obj.get("jwks_uri").and_then(Value::as_str).expect("accepted metadata without a jwks_uri string");
            assert_eq!(url::Url::parse(uri).as_ref(), Ok(&url));
            assert_eq!(url.scheme(), "https");
        }
        Err(reason) => {
            // 64 characters, each escaped to at most 10 (`\u{10ffff}`), and the quotes.
            if let Some(quoted) = reason.strip_prefix("metadata names issuer ") {
                assert!(quoted.chars().count() <= 64 * 10 + 2, "{reason:?}");
            }
        }
    }
}
