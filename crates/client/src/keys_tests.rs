//! Key files: a written key reads back; public-only, mismatched or malformed JWKs are refused
//! naming the file, without echoing key material.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn private_jwk_round_trips_and_publishes_only_the_public_half() {
    let dir = std::env::temp_dir().join(format!("portcullis-keys-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = SigningKey::from_bytes(&[7; 32]);
    let p = write(&dir, "k.jwk", &private_jwk(&key).to_string());
    assert_eq!(load_private_jwk(&p).unwrap().to_bytes(), key.to_bytes());
    let doc = directory_document(&[&key]);
    assert!(doc["keys"][0].get("d").is_none());
    assert_eq!(doc["keys"][0]["kid"], ed25519_thumbprint(&key.verifying_key()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unusable_key_files_are_refused_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("portcullis-keys-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = SigningKey::from_bytes(&[7; 32]);
    let other = SigningKey::from_bytes(&[8; 32]);
    let mut mismatched = private_jwk(&key);
    mismatched["x"] = private_jwk(&other)["x"].clone();
    let cases = [
        ("public.jwk", ed25519_public_jwk(&key.verifying_key()).to_string(), "no private member d"),
        ("mismatch.jwk", mismatched.to_string(), "x is not the public half of d"),
        ("rsa.jwk", r#"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#.to_owned(), "kty must be OKP"),
        ("short.jwk", r#"{"kty":"OKP","crv":"Ed25519","d":"AAAA"}"#.to_owned(), "d is not 32 bytes"),
        ("text.jwk", "not json".to_owned(), "not JSON"),
    ];
    let secret = private_jwk(&key)["d"].as_str().unwrap().to_owned();
    for (name, text, detail) in cases {
        let p = write(&dir, name, &text);
        let msg = load_private_jwk(&p).unwrap_err().to_string();
        assert!(msg.contains(name) && msg.contains(detail), "{msg}");
        assert!(!msg.contains(&secret), "{msg}");
    }
    assert!(load_private_jwk(&dir.join("missing.jwk")).unwrap_err().to_string().starts_with("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn jsonrpc_bodies_and_headers() {
    use crate::{jsonrpc_request, parse_header, tool_call};
    assert_eq!(jsonrpc_request(3, "tools/list", serde_json::Value::Null), serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    assert_eq!(
        tool_call(1, "weather.get", serde_json::json!({"city": "Oslo"})),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "weather.get", "arguments": {"city": "Oslo"}}})
    );
    let (n, v) = parse_header("X-Trace:  abc ").unwrap();
    assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-trace", "abc"));
    assert!(parse_header("no colon").is_err());
}
