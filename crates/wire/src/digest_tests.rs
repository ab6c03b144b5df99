use super::*;
use http::HeaderValue;

fn headers(field: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_DIGEST, HeaderValue::from_str(field).expect("ascii"));
    h
}

/// Every case of `tests/vectors/rfc9530-content-digest.json` (RFC 9530 App. B and D, RFC 9421 B.2).
#[test]
fn rfc9530_vectors() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vectors/rfc9530-content-digest.json")).expect("vendored vectors");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    let check = DigestCheck::new(true);
    let mut n = 0;
    for case in doc["cases"].as_array().expect("cases") {
        let id = case["id"].as_str().expect("id");
        let body = case["body"].as_str().expect("body").as_bytes();
        let got = check.verify(&headers(case["field"].as_str().expect("field")), body);
        match case["expect"].as_str().expect("expect") {
            "match" => assert!(matches!(got, Ok(Some(_))), "{id}: {got:?}"),
            "mismatch" => assert!(matches!(got, Err(DigestError::Mismatch { .. })), "{id}: {got:?}"),
            "no-supported-digest" => assert_eq!(got, Err(DigestError::NoSupportedAlgorithm), "{id}"),
            other => panic!("{id}: unknown expectation {other}"),
        }
        n += 1;
    }
    assert!(n >= 14, "only {n} cases read");
}

#[test]
fn missing_digest_is_refused_only_when_required_signed_and_body_present() {
    let mut signed = HeaderMap::new();
    signed.insert("signature-input", HeaderValue::from_static(r#"sig1=("@method");created=1"#));
    assert_eq!(DigestCheck::new(true).verify(&signed, b"{}"), Err(DigestError::Missing));
    assert_eq!(DigestCheck::new(true).verify(&signed, b""), Ok(None));
    assert_eq!(DigestCheck::new(false).verify(&signed, b"{}"), Ok(None));
    // Unsigned: the signature stage refuses it, with the clearer reason.
    assert_eq!(DigestCheck::new(true).verify(&HeaderMap::new(), b"{}"), Ok(None));
}

#[test]
fn malformed_fields_are_refused() {
    for field in ["sha-256=X48E9q", "sha-256=:not base64!:", "SHA-256=:AAAA:", "sha-256=(:AAAA:)", "sha-256=:AAAA:,"] {
        let got = DigestCheck::new(false).verify(&headers(field), b"x");
        assert!(matches!(got, Err(DigestError::Malformed(_))), "{field}: {got:?}");
    }
}

#[test]
fn every_supported_member_must_match() {
    // sha-512 right, sha-256 wrong: refused although one member matches (RFC 9530 §6.6).
    let field = "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:, sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:";
    let got = DigestCheck::new(false).verify(&headers(field), br#"{"hello": "world"}"#);
    assert_eq!(got, Err(DigestError::Mismatch { algorithm: "sha-256" }));
}

#[test]
fn several_field_lines_are_combined() {
    let mut h = HeaderMap::new();
    h.append(CONTENT_DIGEST, HeaderValue::from_static("sha3-256=:AAAA:"));
    h.append(CONTENT_DIGEST, HeaderValue::from_static("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:"));
    let got = DigestCheck::new(true).verify(&h, br#"{"hello": "world"}"#).expect("verified").expect("present");
    assert_eq!(got.algorithms(), ["sha-256"]);
}

mod properties {
    use super::*;
    use base64::Engine;
    use proptest::prelude::*;

    fn field_for(body: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        format!("sha-256=:{}:, sha-512=:{}:", b64.encode(Sha256::digest(body)), b64.encode(Sha512::digest(body)))
    }

    proptest! {
        #[test]
        fn a_correct_digest_always_verifies(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let got = DigestCheck::new(true).verify(&headers(&field_for(&body)), &body);
            prop_assert_eq!(got.map(|v| v.map(|v| v.algorithms().to_vec())), Ok(Some(vec!["sha-256", "sha-512"])));
        }

        #[test]
        fn any_change_to_the_body_is_a_mismatch(body in proptest::collection::vec(any::<u8>(), 1..512), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let field = field_for(&body);
            let mut tampered = body.clone();
            let i = at.index(tampered.len());
            tampered[i] ^= 1 << bit;
            let got = DigestCheck::new(true).verify(&headers(&field), &tampered);
            prop_assert!(matches!(got, Err(DigestError::Mismatch { .. })), "{:?}", got);
        }

        #[test]
        fn arbitrary_field_values_never_panic(field in "[ -~]{0,200}", body in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(v) = http::HeaderValue::from_str(&field) {
                let mut h = HeaderMap::new();
                h.insert(CONTENT_DIGEST, v);
                let _ = DigestCheck::new(true).verify(&h, &body);
            }
        }
    }
}
