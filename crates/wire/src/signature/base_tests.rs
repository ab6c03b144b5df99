#![allow(clippy::unwrap_used)]

use ed25519_dalek::Verifier;
use http::HeaderValue;
use serde_json::Value;
use sfv::{BareItem, InnerList, Item};

use super::*;
use crate::signature::parse::parse_signatures;
use crate::test_vectors::{ed25519_signing_key, parse_message, vectors, Message};

fn member(case: &Value) -> crate::signature::parse::SignatureMember {
    parse_signatures(case["signature_input"].as_str().unwrap(), case["signature"].as_str().unwrap()).unwrap().remove(0)
}

fn request_view<'a>(m: &'a Message, scheme: &'a str) -> RequestView<'a> {
    RequestView { method: m.method.as_ref().unwrap(), uri: m.uri.as_ref().unwrap(), headers: &m.headers, scheme, authority: None }
}

/// Rebuilds the base of a vector case; responses get the request that produced them.
fn rebuild(case: &Value) -> Vec<u8> {
    let covered = member(case).covered;
    if let Some(req_text) = case["request"].as_str() {
        // Signed directory response: headers from the case, `;req` from the request.
        let req = parse_message(req_text);
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_str(case["response_content_type"].as_str().unwrap()).unwrap());
        headers.insert("content-digest", HeaderValue::from_str(case["content_digest"].as_str().unwrap()).unwrap());
        let msg = MessageView::Response { status: StatusCode::OK, headers: &headers, request: Some(request_view(&req, "https")) };
        return signature_base(&msg, &covered).unwrap();
    }
    let mut m = parse_message(case["message"].as_str().unwrap());
    if let Some(status) = m.status {
        // B.2.4: the printed response's Content-Digest is wrong; the base shows the real one.
        let digest = case["covered_components"].as_array().unwrap().iter().find(|c| c[0] == "\"content-digest\"").unwrap()[1].as_str().unwrap();
        m.headers.insert("content-digest", HeaderValue::from_str(digest).unwrap());
        return signature_base(&MessageView::Response { status, headers: &m.headers, request: None }, &covered).unwrap();
    }
    signature_base(&MessageView::Request(request_view(&m, "https")), &covered).unwrap()
}

#[test]
fn every_vector_base_rebuilds_byte_exactly() {
    let mut n = 0;
    for file in ["rfc9421-signatures.json", "web-bot-auth.json"] {
        for case in vectors(file)["cases"].as_array().unwrap() {
            let base = rebuild(case);
            assert_eq!(String::from_utf8(base).unwrap(), case["signature_base"].as_str().unwrap(), "{}", case["id"]);
            n += 1;
        }
    }
    assert_eq!(n, 17);
}

#[test]
fn every_ed25519_vector_verifies_strictly() {
    let key = ed25519_signing_key().verifying_key();
    let mut n = 0;
    for file in ["rfc9421-signatures.json", "web-bot-auth.json"] {
        for case in vectors(file)["cases"].as_array().unwrap().iter().filter(|c| c["alg"] == "ed25519") {
            let sig = ed25519_dalek::Signature::from_slice(&member(case).signature).unwrap();
            key.verify_strict(&rebuild(case), &sig).unwrap_or_else(|e| panic!("{}: {e}", case["id"]));
            n += 1;
        }
    }
    assert_eq!(n, 8);
}

#[test]
fn ed25519_vectors_are_reproduced_by_signing_the_base() {
    use ed25519_dalek::Signer;
    let key = ed25519_signing_key();
    for id in ["B.2.6", "B.4"] {
        let case = vectors("rfc9421-signatures.json")["cases"].as_array().unwrap().iter().find(|c| c["id"] == id).cloned().unwrap();
        assert_eq!(key.sign(&rebuild(&case)).to_bytes().to_vec(), member(&case).signature, "{id}");
    }
}

#[test]
fn b4_reordered_accept_lines_fail_verification() {
    let case = vectors("rfc9421-signatures.json")["cases"].as_array().unwrap().iter().find(|c| c["id"] == "B.4").cloned().unwrap();
    let mut m = parse_message(case["message"].as_str().unwrap());
    m.headers.remove("accept");
    m.headers.append("accept", HeaderValue::from_static("*/*"));
    m.headers.append("accept", HeaderValue::from_static("application/json"));
    let base = signature_base(&MessageView::Request(request_view(&m, "https")), &member(&case).covered).unwrap();
    let sig = ed25519_dalek::Signature::from_slice(&member(&case).signature).unwrap();
    assert!(ed25519_signing_key().verifying_key().verify(&base, &sig).is_err());
}

/// HMAC-SHA256 (RFC 2104) from sha2, to check the B.2.5 vector without another dependency.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let inner: Vec<u8> = k.iter().map(|b| b ^ 0x36).chain(msg.iter().copied()).collect();
    let ih = Sha256::digest(&inner);
    let outer: Vec<u8> = k.iter().map(|b| b ^ 0x5c).chain(ih.iter().copied()).collect();
    Sha256::digest(&outer).to_vec()
}

#[test]
fn hmac_vector_base_matches_its_mac() {
    use base64::Engine;
    let case = vectors("rfc9421-signatures.json")["cases"].as_array().unwrap().iter().find(|c| c["id"] == "B.2.5").cloned().unwrap();
    let secret = vectors("rfc9421-keys.json")["keys"]["test-shared-secret"]["base64"].as_str().unwrap().to_owned();
    let secret = base64::engine::general_purpose::STANDARD.decode(secret).unwrap();
    assert_eq!(hmac_sha256(&secret, &rebuild(&case)), member(&case).signature);
}

// --- components from RFC 9421 §2.1 and §2.2 examples ---

fn one(name: &str, params: &[(&str, BareItem)]) -> InnerList {
    let mut item = Item::new(BareItem::String(sfv::StringRef::from_str(name).unwrap().to_owned()));
    for (k, v) in params {
        item.params.insert(sfv::KeyRef::from_str(k).unwrap().to_owned(), v.clone());
    }
    InnerList::new(vec![item])
}

fn s(v: &str) -> BareItem {
    BareItem::String(sfv::StringRef::from_str(v).unwrap().to_owned())
}

/// The first line (the component's) of the base for `covered` over `text` (https).
fn line(text: &str, covered: &InnerList) -> Result<String, BaseError> {
    let m = parse_message(text);
    let base = String::from_utf8(signature_base(&MessageView::Request(request_view(&m, "https")), covered)?).unwrap();
    Ok(base.lines().next().unwrap().to_owned())
}

const DICT_REQ: &str = "GET /path?param=value HTTP/1.1\nHost: www.example.com\nExample-Dict:  a=1, b=2;x=1;y=2, c=(a   b    c), d\nExample-Header: value, with, lots\nExample-Header: of, commas";

#[test]
fn derived_components_follow_section_2_2() {
    let cases = [
        ("@method", "\"@method\": GET"),
        ("@target-uri", "\"@target-uri\": https://www.example.com/path?param=value"),
        ("@authority", "\"@authority\": www.example.com"),
        ("@scheme", "\"@scheme\": https"),
        ("@request-target", "\"@request-target\": /path?param=value"),
        ("@path", "\"@path\": /path"),
        ("@query", "\"@query\": ?param=value"),
    ];
    for (name, expected) in cases {
        assert_eq!(line(DICT_REQ, &one(name, &[])).unwrap(), expected);
    }
}

#[test]
fn empty_query_is_a_lone_question_mark() {
    assert_eq!(line("GET /path HTTP/1.1\nHost: a.example", &one("@query", &[])).unwrap(), "\"@query\": ?");
}

#[test]
fn authority_is_lowercased_and_default_port_dropped() {
    assert_eq!(line("GET / HTTP/1.1\nHost: WWW.Example.com:443", &one("@authority", &[])).unwrap(), "\"@authority\": www.example.com");
    assert_eq!(line("GET / HTTP/1.1\nHost: example.com:8443", &one("@authority", &[])).unwrap(), "\"@authority\": example.com:8443");
}

#[test]
fn configured_authority_replaces_host() {
    let m = parse_message("GET / HTTP/1.1\nHost: 10.0.0.7:8080");
    let view = RequestView { authority: Some("mcp.example.com"), ..request_view(&m, "https") };
    let base = signature_base(&MessageView::Request(view), &one("@authority", &[])).unwrap();
    assert!(base.starts_with(b"\"@authority\": mcp.example.com\n"));
}

#[test]
fn uri_authority_wins_over_host_for_h2() {
    let m = parse_message("GET https://h2.example/x HTTP/2\nHost: other.example");
    assert_eq!(signature_base(&MessageView::Request(request_view(&m, "https")), &one("@authority", &[])).unwrap()[..26], *b"\"@authority\": h2.example\n\"");
}

#[test]
fn query_params_are_decoded_and_reencoded() {
    let req = "GET /path?var=this%20is%20a%20big%0Avalue&bar=with+plus+whitespace&fa%C3%A7ade%22%3A%20=something&qux= HTTP/1.1\nHost: a.example";
    let cases = [
        ("var", "\"@query-param\";name=\"var\": this%20is%20a%20big%0Avalue"),
        ("bar", "\"@query-param\";name=\"bar\": with%20plus%20whitespace"),
        ("fa%C3%A7ade%22%3A%20", "\"@query-param\";name=\"fa%C3%A7ade%22%3A%20\": something"),
        ("qux", "\"@query-param\";name=\"qux\": "),
    ];
    for (name, expected) in cases {
        assert_eq!(line(req, &one("@query-param", &[("name", s(name))])).unwrap(), expected);
    }
}

#[test]
fn dictionary_member_and_sf_reserialize_strictly() {
    let cases = [
        (one("example-dict", &[("key", s("a"))]), "\"example-dict\";key=\"a\": 1"),
        (one("example-dict", &[("key", s("d"))]), "\"example-dict\";key=\"d\": ?1"),
        (one("example-dict", &[("key", s("b"))]), "\"example-dict\";key=\"b\": 2;x=1;y=2"),
        (one("example-dict", &[("key", s("c"))]), "\"example-dict\";key=\"c\": (a b c)"),
        (one("example-dict", &[("sf", BareItem::Boolean(true))]), "\"example-dict\";sf: a=1, b=2;x=1;y=2, c=(a b c), d"),
        (one("example-dict", &[]), "\"example-dict\": a=1, b=2;x=1;y=2, c=(a   b    c), d"),
        (one("example-header", &[]), "\"example-header\": value, with, lots, of, commas"),
        (one("example-header", &[("bs", BareItem::Boolean(true))]), "\"example-header\";bs: :dmFsdWUsIHdpdGgsIGxvdHM=:, :b2YsIGNvbW1hcw==:"),
    ];
    for (covered, expected) in cases {
        assert_eq!(line(DICT_REQ, &covered).unwrap(), expected);
    }
}

// --- one test per BaseError variant ---

#[test]
fn non_string_component_is_not_a_string() {
    let covered = InnerList::new(vec![Item::new(BareItem::Integer(sfv::integer(1)))]);
    assert_eq!(line(DICT_REQ, &covered), Err(BaseError::NotAString));
}

#[test]
fn duplicate_component_is_refused_even_with_reordered_params() {
    let mut covered = one("example-dict", &[("key", s("a")), ("sf", BareItem::Boolean(true))]);
    covered.items.extend(one("example-dict", &[("sf", BareItem::Boolean(true)), ("key", s("a"))]).items);
    assert!(matches!(line(DICT_REQ, &covered), Err(BaseError::DuplicateComponent(_))));
    let mut distinct = one("example-dict", &[("key", s("a"))]);
    distinct.items.extend(one("example-dict", &[("key", s("b"))]).items);
    assert!(line(DICT_REQ, &distinct).is_ok());
}

#[test]
fn covered_signature_params_is_refused() {
    assert_eq!(line(DICT_REQ, &one("@signature-params", &[])), Err(BaseError::SignatureParamsCovered));
}

#[test]
fn unknown_or_response_only_derived_component_is_refused() {
    assert_eq!(line(DICT_REQ, &one("@status", &[])), Err(BaseError::UnknownComponent("@status".into())));
    assert_eq!(line(DICT_REQ, &one("@nope", &[])), Err(BaseError::UnknownComponent("@nope".into())));
}

#[test]
fn uppercase_field_name_is_invalid() {
    assert_eq!(line(DICT_REQ, &one("Example-Dict", &[])), Err(BaseError::InvalidName("Example-Dict".into())));
}

#[test]
fn req_tr_unknown_and_misplaced_parameters_are_unsupported() {
    for (covered, param) in [
        (one("@authority", &[("req", BareItem::Boolean(true))]), "req"),
        (one("example-dict", &[("tr", BareItem::Boolean(true))]), "tr"),
        (one("example-dict", &[("foo", BareItem::Boolean(true))]), "foo"),
        (one("example-dict", &[("name", s("a"))]), "name"),
        (one("@method", &[("key", s("a"))]), "key"),
        (one("example-dict", &[("sf", BareItem::Integer(sfv::integer(1)))]), "sf"),
    ] {
        assert!(matches!(line(DICT_REQ, &covered), Err(BaseError::UnsupportedParameter { parameter, .. }) if parameter == param), "{param}");
    }
}

#[test]
fn bs_with_key_is_incompatible() {
    let covered = one("example-dict", &[("bs", BareItem::Boolean(true)), ("key", s("a"))]);
    assert_eq!(line(DICT_REQ, &covered), Err(BaseError::IncompatibleParameters("example-dict".into())));
}

#[test]
fn absent_field_is_missing() {
    assert_eq!(line(DICT_REQ, &one("content-digest", &[])), Err(BaseError::MissingField("content-digest".into())));
}

#[test]
fn absent_dictionary_member_is_missing() {
    assert!(matches!(line(DICT_REQ, &one("example-dict", &[("key", s("zz"))])), Err(BaseError::MissingDictionaryMember { key, .. }) if key == "zz"));
}

#[test]
fn sf_on_unknown_or_invalid_field_is_not_structured() {
    assert!(matches!(line(DICT_REQ, &one("example-header", &[("sf", BareItem::Boolean(true))])), Err(BaseError::NotStructured { .. })));
    let bad = "GET / HTTP/1.1\nHost: a.example\nX-Bad: a=(unclosed";
    assert!(matches!(line(bad, &one("x-bad", &[("key", s("a"))])), Err(BaseError::NotStructured { .. })));
}

#[test]
fn absent_or_repeated_query_param_is_refused() {
    let req = "GET /p?a=1&a=2&b=3 HTTP/1.1\nHost: x.example";
    assert_eq!(line(req, &one("@query-param", &[("name", s("a"))])), Err(BaseError::QueryParam("a".into())));
    assert_eq!(line(req, &one("@query-param", &[("name", s("c"))])), Err(BaseError::QueryParam("c".into())));
    assert_eq!(line(req, &one("@query-param", &[("name", s("b"))])).unwrap(), "\"@query-param\";name=\"b\": 3");
}

#[test]
fn non_ascii_value_or_missing_authority_is_unusable() {
    let mut m = parse_message("GET / HTTP/1.1\nHost: a.example");
    m.headers.insert("x-name", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
    let err = signature_base(&MessageView::Request(request_view(&m, "https")), &one("x-name", &[]));
    assert_eq!(err, Err(BaseError::UnusableValue("x-name".into())));
    let no_host = parse_message("GET / HTTP/1.1\nAccept: */*");
    assert_eq!(
        signature_base(&MessageView::Request(request_view(&no_host, "https")), &one("@authority", &[])),
        Err(BaseError::UnusableValue("@authority".into()))
    );
}

#[test]
fn more_than_64_components_are_too_many() {
    let names: Vec<String> = (0..65).map(|i| format!("x-{i}")).collect();
    let covered = InnerList::new(names.iter().flat_map(|n| one(n, &[]).items).collect());
    assert_eq!(line(DICT_REQ, &covered), Err(BaseError::TooManyComponents(65)));
}

/// The RSA-PSS and ECDSA vectors verify over the rebuilt base too (aws-lc-rs, test only: the
/// gateway itself verifies Ed25519 only).
#[test]
fn rsa_pss_and_ecdsa_vectors_verify_over_the_rebuilt_base() {
    use aws_lc_rs::signature::{RsaPublicKeyComponents, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, RSA_PSS_2048_8192_SHA512};
    use base64::Engine;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(v.as_str().unwrap()).unwrap();
    let keys = vectors("rfc9421-keys.json");
    let rsa = &keys["keys"]["test-key-rsa-pss"]["jwk"];
    let rsa = RsaPublicKeyComponents { n: b64(&rsa["n"]), e: b64(&rsa["e"]) };
    let ec = &keys["keys"]["test-key-ecc-p256"]["jwk"];
    let point: Vec<u8> = [vec![4u8], b64(&ec["x"]), b64(&ec["y"])].concat();
    let mut n = 0;
    for file in ["rfc9421-signatures.json", "web-bot-auth.json"] {
        for case in vectors(file)["cases"].as_array().unwrap() {
            let (base, sig) = (rebuild(case), member(case).signature);
            match case["alg"].as_str().unwrap() {
                "rsa-pss-sha512" => rsa.verify(&RSA_PSS_2048_8192_SHA512, &base, &sig).unwrap_or_else(|_| panic!("{}", case["id"])),
                "ecdsa-p256-sha256" => {
                    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point).verify(&base, &sig).unwrap_or_else(|_| panic!("{}", case["id"]))
                }
                _ => continue,
            }
            n += 1;
        }
    }
    assert_eq!(n, 8);
}
