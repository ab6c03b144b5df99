use std::sync::OnceLock;
use std::time::Duration;

use jsonwebtoken::Header;
use serde_json::json;

use super::super::jwks::{KeySet, DEFAULT_TTL};
use super::super::test_keys::{self, SigningKey};
use super::*;

const ISS: &str = "https://auth.example.com";
const AUD: &str = "https://mcp.example.com/mcp";
const NOW: u64 = 1_784_980_800;

fn now() -> UnixTime {
    UnixTime(Duration::from_secs(NOW))
}

fn rules() -> Rules {
    Rules { issuer: ISS.into(), audience: AUD.into(), skew_secs: 30 }
}

fn ed() -> &'static SigningKey {
    static K: OnceLock<SigningKey> = OnceLock::new();
    K.get_or_init(|| SigningKey::ed("ed-1"))
}

fn claims() -> serde_json::Value {
    json!({"iss": ISS, "sub": "user-1842", "aud": [AUD, "https://other.example"], "exp": NOW + 300, "iat": NOW - 10, "nbf": NOW - 10,
           "client_id": "agent-app", "jti": "j1", "scope": "mcp:tools files:read"})
}

fn with(f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> serde_json::Value {
    let mut c = claims();
    f(c.as_object_mut().expect("object"));
    c
}

fn public(key: &SigningKey) -> PublicKey {
    let set = KeySet::parse(test_keys::jwks(&[key]).to_string().as_bytes(), DEFAULT_TTL).expect("jwks");
    set.candidates(Some(&key.kid), key_kind(key.alg).expect("kind")).into_iter().next().cloned().expect("usable key")
}

/// decode + verify + validate, as the verifier does after picking the key.
fn check(token: &str, key: &SigningKey) -> Result<VerifiedToken, TokenError> {
    let jwt = decode(token)?;
    verify_signature(&jwt, &public(key))?;
    validate_jwt(jwt, &rules(), now())
}

#[test]
fn valid_eddsa_token_gives_identity_scopes_and_claims() {
    let t = check(&ed().sign(&claims()), ed()).expect("valid");
    assert_eq!(t.iss(), ISS);
    assert_eq!(t.sub(), Some("user-1842"));
    assert_eq!(t.aud(), [AUD, "https://other.example"]);
    assert_eq!(t.scopes(), ["mcp:tools", "files:read"]);
    assert_eq!(t.client_id(), Some("agent-app"));
    assert_eq!(t.exp(), NOW + 300);
    assert_eq!(t.claims()["jti"], "j1");
}

#[test]
fn valid_es256_and_ps256_tokens_verify() {
    let ec = SigningKey::ec("ec-1");
    check(&ec.sign(&claims()), &ec).expect("ES256");
    let rsa = SigningKey::rsa("rsa-1").with_alg(jsonwebtoken::Algorithm::PS256);
    check(&rsa.sign(&claims()), &rsa).expect("PS256");
}

#[test]
fn scp_array_and_string_audience_are_read() {
    let c = with(|m| {
        m.remove("scope");
        m.insert("scp".into(), json!(["a", "b", "a"]));
        m.insert("aud".into(), json!(AUD));
    });
    let t = check(&ed().sign(&c), ed()).expect("valid");
    assert_eq!(t.scopes(), ["a", "b"]);
    assert_eq!(t.aud(), [AUD]);
}

#[test]
fn fractional_numeric_dates_are_accepted() {
    let c = with(|m| {
        m.insert("exp".into(), json!((NOW + 60) as f64 + 0.5));
    });
    assert_eq!(check(&ed().sign(&c), ed()).expect("valid").exp(), NOW + 60);
}

#[test]
fn wrong_typ_is_refused() {
    let mut h = Header::new(ed().alg);
    h.typ = Some("JWT".into());
    assert_eq!(decode(&ed().sign_with(&h, &claims())).err(), Some(TokenError::WrongType { typ: "JWT".into() }));
    h.typ = None;
    assert!(matches!(decode(&ed().sign_with(&h, &claims())), Err(TokenError::WrongType { .. })));
    h.typ = Some("application/AT+JWT".into());
    assert!(decode(&ed().sign_with(&h, &claims())).is_ok());
}

#[test]
fn alg_none_and_hmac_are_refused_before_any_key_is_used() {
    assert_eq!(decode(&test_keys::unsigned("ed-1", &claims())).err(), Some(TokenError::UnsupportedAlgorithm { alg: "none".into() }));
    let secret = ed().jwk.to_string();
    assert_eq!(decode(&test_keys::hmac("ed-1", secret.as_bytes(), &claims())).err(), Some(TokenError::UnsupportedAlgorithm { alg: "HS256".into() }));
}

#[test]
fn critical_header_extensions_are_refused() {
    let h = test_keys::b64(json!({"alg": "EdDSA", "typ": "at+jwt", "crit": ["exp"], "exp": 1}).to_string().as_bytes());
    let token = format!("{h}.{}.sig", test_keys::b64(claims().to_string().as_bytes()));
    assert_eq!(decode(&token).err(), Some(TokenError::CriticalHeader));
}

#[test]
fn garbage_is_malformed() {
    for t in ["abc", "a.b", "a.b.c.d", "!!.!!.!!", &"a".repeat(jose::MAX_TOKEN_LEN + 1)] {
        assert!(matches!(decode(t), Err(TokenError::Malformed(_))), "{t:.20}");
    }
    let h = test_keys::b64(br#"{"alg":"EdDSA","typ":"at+jwt"}"#);
    assert!(matches!(decode(&format!("{h}.{}.x", test_keys::b64(b"[1]"))), Err(TokenError::Malformed(_))));
}

/// Found by fuzz/fuzz_targets/jwt_compact.rs: a header with invalid UTF-8 in a member the
/// gateway does not read, or the members as a JSON array, was accepted as a JOSE header
/// (RFC 7515 §5.2 step 4 wants a completely valid JSON object).
#[test]
fn header_that_is_not_a_valid_json_object_is_malformed() {
    let claims = test_keys::b64(claims().to_string().as_bytes());
    let text = |header: &[u8]| decode(&format!("{}.{claims}.s", test_keys::b64(header))).map(|_| ()).map_err(|e| e.to_string());
    assert_eq!(
        text(b"{\"alg\":\"EdDSA\",\"typ\":\"at+jwt\",\"x\":\"\xe3\x8e8\"}"),
        Err("token is malformed: header is not a JOSE header: invalid unicode code point at line 1 column 36".into())
    );
    assert_eq!(text(br#"["EdDSA","at+jwt",null,null]"#), Err("token is malformed: header is not a JOSE header: not a JSON object".into()));
    assert_eq!(text(r#"{"alg":"EdDSA","typ":"at+jwt","x":"é"}"#.as_bytes()), Ok(()));
}

#[test]
fn key_of_the_wrong_kind_is_a_mismatch() {
    let ec = SigningKey::ec("ec-1");
    let token = ed().sign(&claims());
    let jwt = decode(&token).expect("decodes");
    assert!(matches!(verify_signature(&jwt, &public(&ec)), Err(TokenError::KeyMismatch { .. })));
}

#[test]
fn tampered_claims_or_another_key_fail_the_signature() {
    let token = ed().sign(&claims());
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    parts[1] = test_keys::b64(
        with(|m| {
            m.insert("sub".into(), json!("admin"));
        })
        .to_string()
        .as_bytes(),
    );
    assert_eq!(check(&parts.join("."), ed()).err(), Some(TokenError::BadSignature));
    let other = SigningKey::ed("ed-1");
    assert_eq!(check(&token, &other).err(), Some(TokenError::BadSignature));
}

#[test]
fn wrong_issuer_and_wrong_audience_are_refused() {
    let c = with(|m| {
        m.insert("iss".into(), json!("https://evil.example"));
    });
    assert_eq!(check(&ed().sign(&c), ed()).err(), Some(TokenError::WrongIssuer));
    let c = with(|m| {
        m.insert("aud".into(), json!(["https://other.example/mcp"]));
    });
    assert_eq!(check(&ed().sign(&c), ed()).err(), Some(TokenError::WrongAudience { audience: AUD.into() }));
}

#[test]
fn time_window_respects_the_skew() {
    let at = |claim: &str, v: u64| {
        let c = with(|m| {
            m.insert(claim.into(), json!(v));
        });
        check(&ed().sign(&c), ed())
    };
    assert!(at("exp", NOW - 29).is_ok(), "inside the skew");
    assert_eq!(at("exp", NOW - 31).err(), Some(TokenError::Expired { exp: NOW - 31 }));
    assert!(at("nbf", NOW + 29).is_ok());
    assert_eq!(at("nbf", NOW + 31).err(), Some(TokenError::NotYetValid { nbf: NOW + 31 }));
    assert_eq!(at("iat", NOW + 31).err(), Some(TokenError::IssuedInFuture { iat: NOW + 31 }));
}

#[test]
fn required_claims_must_be_present_and_typed() {
    for claim in ["iss", "aud", "exp", "iat", "sub"] {
        let c = with(|m| {
            m.remove(claim);
        });
        assert_eq!(check(&ed().sign(&c), ed()).err(), Some(TokenError::MissingClaim { claim }), "{claim}");
    }
    for (claim, v) in [("exp", json!("soon")), ("aud", json!(7)), ("scope", json!(["a"])), ("sub", json!(1)), ("scp", json!([1]))] {
        let c = with(|m| {
            m.insert(claim.into(), v);
        });
        assert!(matches!(check(&ed().sign(&c), ed()), Err(TokenError::InvalidClaim { .. })), "{claim}");
    }
}
