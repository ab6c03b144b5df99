#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use super::*;
use crate::test_vectors::vectors;
use ed25519_dalek::{Signer as _, SigningKey};
use proptest::prelude::*;
use serde_json::json;

const NOW: u64 = 1_800_000_000;
const HTU: &str = "https://mcp.example.com/mcp";
const TOKEN: &str = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ1c2VyIn0.c2ln";
const BODY: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn b64(v: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(v)
}

/// A proof with this header and these claims, signed by `key` whatever the header says.
fn signed(key: &SigningKey, header: &Value, claims: &Value) -> String {
    let input = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
    format!("{input}.{}", b64(&key.sign(input.as_bytes()).to_bytes()))
}

fn public_jwk(key: &SigningKey) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "x": b64(key.verifying_key().as_bytes())})
}

fn header(key: &SigningKey) -> Value {
    json!({"typ": "dpop+jwt", "alg": "EdDSA", "jwk": public_jwk(key)})
}

fn claims() -> Value {
    json!({"jti": "j-1", "htm": "POST", "htu": HTU, "iat": NOW, "ath": access_token_hash(TOKEN)})
}

fn request(uris: &[String]) -> Request<'_> {
    Request { method: "POST", uris, access_token: TOKEN, body: BODY, now: UnixTime(std::time::Duration::from_secs(NOW)), max_age_secs: 300, skew_secs: 30 }
}

fn uris() -> Vec<String> {
    vec![normalise_htu(HTU).unwrap()]
}

#[test]
fn the_rfc_resource_proof_verifies_and_its_key_is_the_tokens_cnf_jkt() {
    let v = vectors("rfc9449-dpop.json");
    let resource = v["proofs"].as_array().unwrap().iter().find(|p| p["id"] == "resource-request").unwrap();
    let proof = parse(resource["dpop"].as_str().unwrap()).expect("RFC 9449 Figure 13 proof");
    assert_eq!(proof.alg(), DpopAlg::Es256);
    assert_eq!(proof.jkt(), v["dpop_public_key"]["thumbprint"]);
    assert_eq!(proof.jkt(), v["access_tokens"]["jwt"]["payload"]["cnf"]["jkt"], "Figure 8's cnf.jkt");
    assert_eq!(access_token_hash(v["access_tokens"]["opaque"]["value"].as_str().unwrap()), v["access_tokens"]["opaque"]["ath"]);
}

#[test]
fn every_constructed_request_variation_is_accepted_or_refused_as_the_vectors_say() {
    let v = vectors("rfc9449-dpop.json");
    let resource = v["proofs"].as_array().unwrap().iter().find(|p| p["id"] == "resource-request").unwrap();
    let proof = parse(resource["dpop"].as_str().unwrap()).unwrap();
    let cases = v["resource_checks"]["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let r = &case["request"];
        let uris = vec![normalise_htu(r["uri"].as_str().unwrap()).unwrap()];
        let request = Request {
            method: r["method"].as_str().unwrap(),
            uris: &uris,
            access_token: r["token"].as_str().unwrap(),
            body: b"",
            now: UnixTime(std::time::Duration::from_secs(r["now"].as_u64().unwrap())),
            max_age_secs: r["max_age"].as_u64().unwrap(),
            skew_secs: r["skew"].as_u64().unwrap(),
        };
        let expect = case["expect"].as_str().unwrap();
        let got = proof.check(&request);
        assert_eq!(got.is_ok(), expect == "accept", "{}: {got:?}", case["id"]);
    }
}

#[test]
fn the_agents_own_proof_round_trips_with_its_web_bot_auth_thumbprint() {
    let k = key();
    let proof = parse(&ed25519_proof(&k, "POST", HTU, TOKEN, NOW)).expect("our own EdDSA proof");
    assert_eq!(proof.jkt(), crate::signature::ed25519_thumbprint(&k.verifying_key()), "cnf.jkt = the agent's keyid");
    assert_eq!(proof.jti().len(), 22, "128 random bits");
    proof.check(&request(&uris())).expect("valid for the request it was made for");
    let other = parse(&ed25519_proof(&k, "POST", HTU, TOKEN, NOW)).unwrap();
    assert_ne!(proof.jti(), other.jti(), "every proof has its own jti");
}

#[test]
fn the_rfc_9864_name_ed25519_is_accepted_like_eddsa() {
    let k = key();
    let mut h = header(&k);
    h["alg"] = json!("Ed25519");
    let proof = parse(&signed(&k, &h, &claims())).expect("Ed25519 is EdDSA's fully specified name");
    assert_eq!(proof.alg(), DpopAlg::Ed25519);
}

#[test]
fn none_hmac_and_unknown_algorithms_are_refused_before_any_key_is_read() {
    let k = key();
    for alg in ["none", "HS256", "ES512", "made-up"] {
        let mut h = header(&k);
        h["alg"] = json!(alg);
        let err = parse(&signed(&k, &h, &claims())).expect_err(alg);
        assert!(matches!(err, DpopError::UnsupportedAlgorithm { .. }), "{alg}: {err}");
        assert!(!err.to_string().contains("made-up"), "unregistered names are not quoted: {err}");
    }
    let unsigned =
        format!("{}.{}.", b64(json!({"typ": "dpop+jwt", "alg": "none", "jwk": public_jwk(&k)}).to_string().as_bytes()), b64(claims().to_string().as_bytes()));
    assert!(matches!(parse(&unsigned), Err(DpopError::UnsupportedAlgorithm { .. })));
}

#[test]
fn a_private_key_in_the_header_is_refused() {
    let k = key();
    let mut h = header(&k);
    h["jwk"]["d"] = json!(b64(k.as_bytes()));
    assert_eq!(parse(&signed(&k, &h, &claims())).unwrap_err(), DpopError::PrivateKey);
    let mut h = header(&k);
    h["jwk"] = json!({"kty": "oct", "k": "c2VjcmV0"});
    assert_eq!(parse(&signed(&k, &h, &claims())).unwrap_err(), DpopError::PrivateKey, "a symmetric key is never public");
}

#[test]
fn header_rules_typ_crit_and_key_type() {
    let k = key();
    let mut h = header(&k);
    h["typ"] = json!("JWT");
    assert!(matches!(parse(&signed(&k, &h, &claims())), Err(DpopError::WrongType { .. })));
    let mut h = header(&k);
    h.as_object_mut().unwrap().remove("typ");
    assert!(matches!(parse(&signed(&k, &h, &claims())), Err(DpopError::WrongType { .. })));
    let mut h = header(&k);
    h["crit"] = json!(["b64"]);
    assert_eq!(parse(&signed(&k, &h, &claims())).unwrap_err(), DpopError::CriticalHeader);
    let mut h = header(&k);
    h.as_object_mut().unwrap().remove("jwk");
    assert_eq!(parse(&signed(&k, &h, &claims())).unwrap_err(), DpopError::MissingKey);
    let mut h = header(&k);
    h["alg"] = json!("ES256");
    assert!(matches!(parse(&signed(&k, &h, &claims())), Err(DpopError::UnusableKey { alg: "ES256", .. })), "an OKP key cannot verify ES256");
}

#[test]
fn a_proof_signed_by_another_key_than_its_header_names_is_refused() {
    let (k, other) = (key(), SigningKey::from_bytes(&[9; 32]));
    assert_eq!(parse(&signed(&other, &header(&k), &claims())).unwrap_err(), DpopError::BadSignature);
    let good = signed(&k, &header(&k), &claims());
    let (input, _) = good.rsplit_once('.').unwrap();
    assert_eq!(parse(&format!("{input}.{}", b64(&[0; 64]))).unwrap_err(), DpopError::BadSignature);
}

#[test]
fn required_claims_and_their_types() {
    let k = key();
    for claim in ["jti", "htm", "htu", "iat"] {
        let mut c = claims();
        c.as_object_mut().unwrap().remove(claim);
        assert!(matches!(parse(&signed(&k, &header(&k), &c)), Err(DpopError::MissingClaim { .. })), "{claim}");
    }
    let mut c = claims();
    c.as_object_mut().unwrap().remove("ath");
    let proof = parse(&signed(&k, &header(&k), &c)).expect("ath is checked against the request");
    assert_eq!(proof.check(&request(&uris())).unwrap_err(), DpopError::MissingClaim { claim: "ath" }, "a resource server needs ath (§7.1)");
    let mut c = claims();
    c["jti"] = json!("x".repeat(MAX_JTI_LEN + 1));
    assert_eq!(parse(&signed(&k, &header(&k), &c)).unwrap_err(), DpopError::InvalidClaim { claim: "jti" });
    let mut c = claims();
    c["iat"] = json!("now");
    assert_eq!(parse(&signed(&k, &header(&k), &c)).unwrap_err(), DpopError::InvalidClaim { claim: "iat" });
}

#[test]
fn request_checks_method_uri_window_and_token_hash() {
    let k = key();
    let uris = uris();
    let proof = |c: Value| parse(&signed(&k, &header(&k), &c)).unwrap();
    let mut c = claims();
    c["htm"] = json!("post");
    assert_eq!(proof(c).check(&request(&uris)).unwrap_err(), DpopError::WrongMethod, "methods are case-sensitive");
    let mut c = claims();
    c["htu"] = json!("https://other.example.com/mcp");
    assert_eq!(proof(c).check(&request(&uris)).unwrap_err(), DpopError::WrongUri);
    let mut c = claims();
    c["htu"] = json!("not a url");
    assert_eq!(proof(c).check(&request(&uris)).unwrap_err(), DpopError::WrongUri);
    let mut c = claims();
    c["htu"] = json!("HTTPS://MCP.example.com:443/./mcp?x=1#f");
    proof(c).check(&request(&uris)).expect("normalised htu");
    let mut c = claims();
    c["iat"] = json!(NOW - 331);
    assert!(matches!(proof(c).check(&request(&uris)), Err(DpopError::TooOld { .. })));
    let mut c = claims();
    c["iat"] = json!(NOW - 330);
    proof(c).check(&request(&uris)).expect("max_age + skew is still accepted");
    let mut c = claims();
    c["iat"] = json!(NOW + 31);
    assert!(matches!(proof(c).check(&request(&uris)), Err(DpopError::IssuedInFuture { .. })));
    let mut c = claims();
    c["ath"] = json!(access_token_hash("another token"));
    assert_eq!(proof(c).check(&request(&uris)).unwrap_err(), DpopError::WrongTokenHash);
}

#[test]
fn a_content_digest_claim_must_match_the_body() {
    let k = key();
    let uris = uris();
    let with = |digest: &str| {
        let mut c = claims();
        c["content_digest"] = json!(digest);
        parse(&signed(&k, &header(&k), &c)).unwrap()
    };
    let right = format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(BODY)));
    with(&right).check(&request(&uris)).expect("the MCP DPoP extension's body binding");
    let wrong = format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(b"another body")));
    assert_eq!(with(&wrong).check(&request(&uris)).unwrap_err(), DpopError::WrongContentDigest);
    assert_eq!(with("md5=:AAAA:").check(&request(&uris)).unwrap_err(), DpopError::InvalidClaim { claim: "content_digest" });
}

#[test]
fn htu_normalisation_follows_rfc_3986_6_2_2_and_6_2_3() {
    let n = |s: &str| normalise_htu(s);
    assert_eq!(n("HTTPS://Resource.Example.ORG:443/protectedresource").as_deref(), Some("https://resource.example.org/protectedresource"));
    assert_eq!(n("https://resource.example.org/%70rotected%2fresource"), n("https://resource.example.org/protected%2Fresource"));
    assert_eq!(n("https://a.example/x/../mcp"), n("https://a.example/mcp"));
    assert_eq!(n("https://a.example").as_deref(), Some("https://a.example/"));
    assert_ne!(n("https://a.example:8443/mcp"), n("https://a.example/mcp"));
    assert_ne!(n("https://a.example/mcp/"), n("https://a.example/mcp"));
    assert_ne!(n("http://a.example/mcp"), n("https://a.example/mcp"));
    assert_eq!(n("ftp://a.example/mcp"), None);
    assert_eq!(n("https://user@a.example/mcp"), None, "no userinfo");
}

/// Spellings the WHATWG parser accepts and RFC 3986 does not: each would have a reading here
/// (the gateway's URL) that another parser does not share, so none is an `htu`.
#[test]
fn htu_spellings_only_a_lenient_parser_reads_are_refused() {
    for lenient in [
        "https:a.example/mcp",
        "https:/a.example/mcp",
        "https://a.example\\mcp",
        "https://a.example/m\tcp",
        "https://a.example/mcp\n",
        " https://a.example/mcp",
        "https://a.ex ample/mcp",
        // A `%` that starts no `%xx`: decoding `%61` after it would make a new escape, `%a0`,
        // that a second reading decodes again (found by `normalising_twice_changes_nothing`).
        "https://a.example/%%610",
        "https://a.example/mcp%",
        "https://a.example/mcp%4",
        "https://a.example/%zz",
    ] {
        assert_eq!(normalise_htu(lenient), None, "{lenient:?}");
    }
    assert!(normalise_htu("https://a.example/mcp").is_some());
}

#[test]
fn the_dpop_field_is_read_once() {
    let mut headers = HeaderMap::new();
    assert_eq!(proof_header(&headers), Ok(None));
    headers.append(DPOP, "a.b.c".parse().unwrap());
    assert_eq!(proof_header(&headers), Ok(Some("a.b.c")));
    headers.append(DPOP, "d.e.f".parse().unwrap());
    assert_eq!(proof_header(&headers), Err(DpopError::MalformedHeader("sent more than once")));
}

#[test]
fn refusals_never_quote_the_proof_or_its_claims() {
    let k = key();
    let secretish = "SECRET-CLAIM-VALUE";
    let mut h = header(&k);
    h["typ"] = json!(secretish);
    let err = parse(&signed(&k, &h, &claims())).unwrap_err().to_string();
    assert!(!err.contains(secretish), "{err}");
    let err = parse(&format!("{}.{}.x", b64(format!("{{\"alg\": {secretish}").as_bytes()), b64(b"{}"))).unwrap_err().to_string();
    assert!(!err.contains(secretish), "{err}");
    let mut c = claims();
    c["iat"] = json!(secretish);
    let err = parse(&signed(&k, &header(&k), &c)).unwrap_err().to_string();
    assert!(!err.contains(secretish), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parse_never_panics_and_refuses_what_it_cannot_verify(s in ".{0,400}") {
        prop_assert!(parse(&s).is_err());
    }

    #[test]
    fn parse_refuses_any_changed_byte_of_a_valid_proof(at in 0usize..400, byte in any::<u8>()) {
        let good = ed25519_proof(&key(), "POST", HTU, TOKEN, NOW);
        let mut bytes = good.clone().into_bytes();
        let at = at % bytes.len();
        prop_assume!(bytes[at] != byte);
        bytes[at] = byte;
        if let Ok(changed) = String::from_utf8(bytes) {
            // base64url has no two spellings of the same bytes except in the last character's
            // unused bits, which the decoder refuses; so any change is a change of content.
            prop_assert!(parse(&changed).is_err(), "{changed}");
        }
    }

    #[test]
    fn normalising_twice_changes_nothing(path in "(/[a-zA-Z0-9%._~-]{0,8}){0,4}") {
        let uri = format!("https://mcp.example.com{path}");
        if let Some(once) = normalise_htu(&uri) {
            prop_assert_eq!(normalise_htu(&once), Some(once.clone()));
        }
    }
}
