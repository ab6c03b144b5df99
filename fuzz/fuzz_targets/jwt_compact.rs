//! `Authorization` → bearer token → JWS compact decode (untrusted header bytes). Input: one
//! `Authorization` value per `\n`-separated line (invalid header values are skipped); the whole
//! input, when UTF-8, is also decoded as a token on its own so bytes the header rules refuse
//! still reach the decoder. A bare JWT or a `Bearer …` line is thus a valid input.
//! Invariants: a bearer token is the token68 at the end of the only `Authorization` value,
//! after a case-insensitive `Bearer` and spaces; `decode` accepts only three segments
//! (`looks_like_jwt`), and then its signing input is exactly the first two segments and its
//! signature the third, its `alg` and `typ` are those of the header and its claims those of the
//! second segment; a refusal names the rule in the order the stage documents.
#![no_main]

use base64::Engine as _;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use portcullis_wire::jose::{self as compact, Alg, CompactError, MAX_TOKEN_LEN};
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check_decode(text);
    }
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        if let Ok(v) = HeaderValue::from_bytes(line) {
            headers.append(AUTHORIZATION, v);
        }
    }
    match compact::bearer_token(&headers) {
        Ok(None) => assert!(headers.is_empty()),
        Ok(Some(token)) => {
            check_bearer(&headers, token);
            check_decode(token);
        }
        Err(e) => assert!(matches!(e, CompactError::MalformedHeader(_)), "{e:?}"),
    }
});

fn check_bearer(headers: &HeaderMap, token: &str) {
    let values: Vec<&HeaderValue> = headers.get_all(AUTHORIZATION).iter().collect();
    assert_eq!(values.len(), 1, "a token from a repeated Authorization header");
    let value = values[0].to_str().expect("a token from a non-ASCII header");
    let prefix = value.strip_suffix(token).expect("the token is the end of the value");
    let (scheme, spaces) = prefix.split_once(' ').expect("scheme, then a space");
    assert!(scheme.eq_ignore_ascii_case("bearer"), "{scheme:?}");
    assert!(spaces.bytes().all(|b| b == b' '));
    let body = token.trim_end_matches('=');
    assert!(!body.is_empty());
    assert!(body.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)), "{token:?}");
}

fn check_decode(token: &str) {
    let segments: Vec<&str> = token.split('.').collect();
    assert_eq!(compact::looks_like_jwt(token), segments.len() == 3);
    let jws = match compact::decode(token) {
        Ok(jws) => jws,
        Err(e) => {
            if token.len() > MAX_TOKEN_LEN {
                assert_eq!(e, CompactError::TooLong);
            } else if segments.len() != 3 {
                assert_eq!(e, CompactError::NotCompact, "{} segments", segments.len());
            } else {
                assert!(!matches!(e, CompactError::TooLong | CompactError::NotCompact | CompactError::MalformedHeader(_)), "{e:?}");
            }
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert!(token.len() <= MAX_TOKEN_LEN);
    assert_eq!(segments.len(), 3, "decode accepted {} segments", segments.len());
    assert_eq!(jws.signing_input, format!("{}.{}", segments[0], segments[1]));
    assert_eq!(jws.signature, segments[2]);
    assert!(std::ptr::eq(jws.signing_input.as_ptr(), token.as_ptr()), "the signing input is borrowed from the token");
    let part = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).expect("accepted a part that is not base64url");
    let header: Map<String, Value> = serde_json::from_slice(&part(segments[0])).expect("accepted a header that is not an object");
    let alg = match jws.alg {
        Alg::Rs256 => "RS256",
        Alg::Ps256 => "PS256",
        Alg::Es256 => "ES256",
        Alg::EdDsa => "EdDSA",
    };
    assert_eq!(header.get("alg").and_then(Value::as_str), Some(alg));
    let typ = header.get("typ").and_then(Value::as_str).expect("accepted a token without typ").to_ascii_lowercase();
    assert!(typ == "at+jwt" || typ == "application/at+jwt", "{typ:?}");
    assert!(header.get("crit").is_none_or(Value::is_null), "accepted crit");
    assert_eq!(jws.kid.as_deref(), header.get("kid").and_then(Value::as_str));
    let claims: Map<String, Value> = serde_json::from_slice(&part(segments[1])).expect("accepted claims that are not an object");
    assert_eq!(jws.claims, claims);
}
