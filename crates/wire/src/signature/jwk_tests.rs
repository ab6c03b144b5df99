#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;
use crate::test_vectors::{ed25519_signing_key, vectors};

#[test]
fn every_thumbprint_vector_matches() {
    let v = vectors("jwk-thumbprint.json");
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 5);
    for case in cases {
        assert_eq!(jwk_thumbprint(&case["jwk"]).unwrap(), case["thumbprint"].as_str().unwrap(), "{}", case["id"]);
    }
}

#[test]
fn thumbprint_ignores_kid_and_uses_computed_value() {
    let v = vectors("jwk-thumbprint.json");
    let inc = &v["known_inconsistency"];
    let mut jwk = inc["jwk"].clone();
    jwk["kid"] = inc["example_kid"].clone();
    assert_eq!(jwk_thumbprint(&jwk).unwrap(), inc["computed_thumbprint"].as_str().unwrap());
}

#[test]
fn test_keys_thumbprints_match_keys_file() {
    let keys = vectors("rfc9421-keys.json");
    for name in ["test-key-rsa-pss", "test-key-ecc-p256", "test-key-ed25519"] {
        let k = &keys["keys"][name];
        assert_eq!(jwk_thumbprint(&k["jwk"]).unwrap(), k["jwk_thumbprint_sha256"].as_str().unwrap(), "{name}");
    }
}

#[test]
fn ed25519_private_d_derives_public_x_and_thumbprint() {
    let key = ed25519_signing_key();
    let jwk = ed25519_public_jwk(&key.verifying_key());
    assert_eq!(jwk["x"], "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs");
    assert_eq!(ed25519_thumbprint(&key.verifying_key()), "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U");
    assert_eq!(jwk["kid"], "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U");
    assert_eq!(verifying_key_from_jwk(&jwk).unwrap(), key.verifying_key());
}

#[test]
fn padded_x_is_accepted() {
    let jwk = json!({"kty": "OKP", "crv": "Ed25519", "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs="});
    assert!(verifying_key_from_jwk(&jwk).is_ok());
}

fn ed() -> serde_json::Value {
    json!({"kty": "OKP", "crv": "Ed25519", "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"})
}

#[test]
fn not_an_object_is_refused() {
    assert_eq!(verifying_key_from_jwk(&json!([1])), Err(JwkError::NotAnObject));
    assert_eq!(jwk_thumbprint(&json!("x")), Err(JwkError::NotAnObject));
}

#[test]
fn missing_member_is_named() {
    assert_eq!(jwk_thumbprint(&json!({"kty": "EC", "crv": "P-256", "x": "a"})), Err(JwkError::MissingMember("y")));
    assert_eq!(verifying_key_from_jwk(&json!({"kty": "OKP", "crv": "Ed25519"})), Err(JwkError::MissingMember("x")));
}

#[test]
fn unsupported_key_type_is_refused() {
    assert_eq!(jwk_thumbprint(&json!({"kty": "oct", "k": "a"})), Err(JwkError::UnsupportedKeyType("oct".into())));
    assert_eq!(verifying_key_from_jwk(&key_jwk_rsa()), Err(JwkError::UnsupportedKeyType("RSA".into())));
}

fn key_jwk_rsa() -> serde_json::Value {
    json!({"kty": "RSA", "e": "AQAB", "n": "abc"})
}

#[test]
fn unsupported_curve_is_refused() {
    let mut jwk = ed();
    jwk["crv"] = json!("X25519");
    assert_eq!(verifying_key_from_jwk(&jwk), Err(JwkError::UnsupportedCurve("X25519".into())));
}

#[test]
fn invalid_x_is_refused() {
    let mut jwk = ed();
    jwk["x"] = json!("AAAA");
    assert!(matches!(verifying_key_from_jwk(&jwk), Err(JwkError::InvalidKey(_))));
    jwk["x"] = json!("not base64!");
    assert!(matches!(verifying_key_from_jwk(&jwk), Err(JwkError::InvalidKey(_))));
}

#[test]
fn private_key_material_is_refused() {
    let mut jwk = ed();
    jwk["d"] = json!("n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU");
    assert_eq!(verifying_key_from_jwk(&jwk), Err(JwkError::PrivateKeyMaterial));
}

#[test]
fn algorithm_mismatch_is_refused() {
    let mut jwk = ed();
    jwk["alg"] = json!("rsa-pss-sha512");
    assert_eq!(verifying_key_from_jwk(&jwk), Err(JwkError::AlgorithmMismatch("rsa-pss-sha512".into())));
    jwk["alg"] = json!("ed25519");
    assert!(verifying_key_from_jwk(&jwk).is_ok());
}

#[test]
fn non_signature_use_is_refused() {
    let mut jwk = ed();
    jwk["use"] = json!("enc");
    assert_eq!(verifying_key_from_jwk(&jwk), Err(JwkError::NotForSignatures("enc".into())));
}
