use std::time::Duration;

use http::header::AUTHORIZATION;
use http::HeaderValue;
use serde_json::json;

use super::jwks::{KeySet, DEFAULT_TTL};
use super::test_keys::{self, SigningKey};
use super::*;

const ISS: &str = "https://auth.example.com";
const AUD: &str = "https://mcp.example.com/mcp";
const NOW: u64 = 1_784_980_800;

fn at(secs: u64) -> UnixTime {
    UnixTime(Duration::from_secs(secs))
}

fn oauth(f: impl FnOnce(&mut config::RawOAuth)) -> config::OAuth {
    config::OAuth::try_from(oauth_raw(f)).expect("valid [oauth]")
}

fn oauth_raw(f: impl FnOnce(&mut config::RawOAuth)) -> config::RawOAuth {
    let mut raw = config::RawOAuth {
        issuer: Some(ISS.into()),
        audience: Some(AUD.into()),
        // Never fetched: the unit tests preload the key set. Port 9 (discard) is closed.
        jwks_url: Some("https://127.0.0.1:9/jwks".into()),
        fetch_timeout: config::HumanDuration(Duration::from_millis(200)),
        ..config::RawOAuth::default()
    };
    f(&mut raw);
    raw
}

async fn verifier_with(key: &SigningKey, f: impl FnOnce(&mut config::RawOAuth)) -> TokenVerifier {
    let v = TokenVerifier::new(&oauth(f)).expect("valid config");
    v.jwks.preload(KeySet::parse(test_keys::jwks(&[key]).to_string().as_bytes(), DEFAULT_TTL).expect("jwks")).await;
    v
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).expect("header"));
    h
}

fn claims(exp: u64) -> serde_json::Value {
    json!({"iss": ISS, "sub": "user-1", "aud": AUD, "exp": exp, "iat": NOW, "scope": "mcp:tools"})
}

#[test]
fn bearer_header_forms() {
    let h = |v: &str| {
        let mut m = HeaderMap::new();
        m.insert(AUTHORIZATION, HeaderValue::from_str(v).expect("value"));
        m
    };
    assert_eq!(bearer_token(&HeaderMap::new()), Ok(None));
    assert_eq!(bearer_token(&h("Bearer abc.def-_~+/==")), Ok(Some("abc.def-_~+/==")));
    assert_eq!(bearer_token(&h("bearer abc")), Ok(Some("abc")), "scheme is case-insensitive");
    for bad in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearer a b", "Bearer a,b", "Bearer ==", "Token abc"] {
        assert!(matches!(bearer_token(&h(bad)), Err(TokenError::MalformedHeader(_))), "{bad:?}");
    }
    let mut twice = h("Bearer a");
    twice.append(AUTHORIZATION, HeaderValue::from_static("Bearer b"));
    assert_eq!(bearer_token(&twice), Err(TokenError::MalformedHeader("sent more than once")));
}

/// The refusal texts clients see in `reason` for a malformed header or token, pinned so that
/// moving the parsing (`compact`) cannot change a byte of them.
#[test]
fn malformed_header_and_token_refusal_texts_are_stable() {
    let h = |v: &[u8]| {
        let mut m = HeaderMap::new();
        m.insert(AUTHORIZATION, HeaderValue::from_bytes(v).expect("value"));
        m
    };
    let mut twice = h(b"Bearer a");
    twice.append(AUTHORIZATION, HeaderValue::from_static("Bearer b"));
    let header_cases: [(HeaderMap, &str); 6] = [
        (twice, "sent more than once"),
        (h(b"Bearer \xe9t\xe9"), "not ASCII"),
        (h(b"Bearer"), "expected \"Bearer <token>\""),
        (h(b"Basic dXNlcjpwYXNz"), "scheme is not Bearer"),
        (h(b"Bearer    "), "empty token"),
        (h(b"Bearer a,b"), "token is not a token68"),
    ];
    for (headers, why) in header_cases {
        let err = bearer_token(&headers).expect_err(why);
        assert_eq!(err.to_string(), format!("Authorization header is malformed: {why}"));
    }
    let header = |v: serde_json::Value| test_keys::b64(v.to_string().as_bytes());
    let good = header(json!({"alg": "EdDSA", "typ": "at+jwt"}));
    let claims = test_keys::b64(claims(NOW).to_string().as_bytes());
    let long_typ = "x".repeat(100);
    let token_cases = [
        ("a".repeat(jose::MAX_TOKEN_LEN + 1), "token is malformed: token longer than 16384 bytes".to_owned()),
        ("a.b".into(), "token is malformed: not a JWS compact serialization (three dot-separated parts)".into()),
        ("a.b.c.d".into(), "token is malformed: not a JWS compact serialization (three dot-separated parts)".into()),
        ("!!.a.b".into(), "token is malformed: header is not base64url".into()),
        (format!("{}.a.b", header(json!([1]))), "token is malformed: header is not a JOSE header: not a JSON object".into()),
        (format!("{}.a.b", header(json!({"typ": "at+jwt"}))), "token is malformed: header is not a JOSE header: alg is missing or not a string".into()),
        (format!("{}.{claims}.s", header(json!({"alg": "EdDSA", "typ": "JWT"}))), "token type \"JWT\" is not at+jwt".into()),
        (format!("{}.{claims}.s", header(json!({"alg": "EdDSA", "typ": long_typ}))), "token type \"(unregistered)\" is not at+jwt".into()),
        (format!("{}.{claims}.s", header(json!({"alg": "none", "typ": "at+jwt"}))), "token algorithm \"none\" is not accepted".into()),
        (format!("{}.{claims}.s", header(json!({"alg": "EdDSA", "typ": "at+jwt", "crit": ["exp"]}))), "token header has critical extensions".into()),
        (format!("{good}.!!.s"), "token is malformed: claims is not base64url".into()),
        (
            format!("{good}.{}.s", test_keys::b64(b"[1]")),
            "token is malformed: claims are not a JSON object: JSON of another type or shape at line 1 column 0".into(),
        ),
        (
            format!("{good}.{}.s", test_keys::b64(b"{\"a\":")),
            "token is malformed: claims are not a JSON object: EOF while parsing a value at line 1 column 5".into(),
        ),
    ];
    for (t, text) in token_cases {
        assert_eq!(token::decode(&t).expect_err(&text).to_string(), text, "{t:.40}");
    }
}

#[tokio::test]
async fn token_in_query_is_refused_and_other_queries_pass() {
    let v = verifier_with(&SigningKey::ed("k"), |_| {}).await;
    assert_eq!(v.check_query(&"/mcp?access_token=abc".parse().expect("uri")), Err(TokenError::TokenInQuery));
    assert_eq!(v.check_query(&"/mcp?x=1&access%5Ftoken=abc".parse().expect("uri")), Err(TokenError::TokenInQuery));
    assert_eq!(v.check_query(&"/mcp?token=abc".parse().expect("uri")), Ok(()));
    assert_eq!(v.check_query(&"/mcp".parse().expect("uri")), Ok(()));
}

#[tokio::test]
async fn missing_token_is_an_error_only_when_required() {
    let key = SigningKey::ed("k");
    let required = verifier_with(&key, |_| {}).await;
    assert_eq!(required.authenticate(&HeaderMap::new(), at(NOW)).await.err(), Some(TokenError::Missing));
    let optional = verifier_with(&key, |r| r.required = false).await;
    assert!(optional.authenticate(&HeaderMap::new(), at(NOW)).await.expect("optional").is_none());
    // A token that is sent is verified even when not required.
    let bad = key.sign(&claims(NOW - 3600));
    assert!(matches!(optional.authenticate(&bearer(&bad), at(NOW)).await, Err(TokenError::Expired { .. })));
}

#[tokio::test]
async fn cached_token_is_rechecked_against_the_request_time() {
    let key = SigningKey::ed("k");
    let v = verifier_with(&key, |_| {}).await;
    let token = key.sign(&claims(NOW + 60));
    let first = v.authenticate(&bearer(&token), at(NOW)).await.expect("valid").expect("token");
    assert_eq!(first.sub(), Some("user-1"));
    let again = v.authenticate(&bearer(&token), at(NOW + 1)).await.expect("cached").expect("token");
    assert_eq!(again.sub(), Some("user-1"));
    // Same token, later request: the cache entry must not outlive `exp` + skew.
    assert_eq!(v.authenticate(&bearer(&token), at(NOW + 91)).await.err(), Some(TokenError::Expired { exp: NOW + 60 }));
    let encoded = {
        let mut m = crate::telemetry::Metrics::new();
        m.register_token(v.metrics());
        m.encode()
    };
    assert!(encoded.contains("portcullis_token_cache_lookups_total{result=\"hit\"} 2"), "{encoded}");
    assert!(encoded.contains("portcullis_token_cache_lookups_total{result=\"miss\"} 1"), "{encoded}");
}

#[tokio::test]
async fn refused_tokens_are_not_cached() {
    let key = SigningKey::ed("k");
    let v = verifier_with(&key, |_| {}).await;
    let token = key.sign(&json!({"iss": ISS, "sub": "u", "aud": "https://other.example", "exp": NOW + 60, "iat": NOW}));
    for _ in 0..2 {
        assert!(matches!(v.authenticate(&bearer(&token), at(NOW)).await, Err(TokenError::WrongAudience { .. })));
    }
    assert_eq!(v.cache.as_ref().map(|c| c.entry_count()), Some(0));
}

#[tokio::test]
async fn unknown_kid_with_refetch_rate_limited_is_refused_without_fetching() {
    let key = SigningKey::ed("k");
    let v = verifier_with(&key, |_| {}).await;
    // Take the refetch slot, as an earlier unknown kid would have.
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW)), Ok(true));
    let forged = SigningKey::ed("forged");
    let err = v.authenticate(&bearer(&forged.sign(&claims(NOW + 60))), at(NOW + 1)).await.expect_err("unknown kid");
    assert_eq!(err, TokenError::UnknownKeyId);
    assert!(!err.to_string().contains("forged"), "the client's kid is not quoted: {err}");
}

#[tokio::test]
async fn a_request_timed_before_the_last_refetch_does_not_refetch_again() {
    let v = verifier_with(&SigningKey::ed("k"), |_| {}).await;
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW + 10)), Ok(true));
    // Requests are timed at arrival and race: one that arrived earlier is handled later.
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW + 5)), Ok(false));
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW + 10 + 29)), Ok(false));
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW + 10 + 30)), Ok(true));
}

#[tokio::test]
async fn unknown_kid_refetches_beyond_the_budget_are_refused_and_counted() {
    let key = SigningKey::ed("k");
    let v = verifier_with(&key, |r| {
        r.jwks_refetch_interval = config::HumanDuration(Duration::from_millis(1));
        r.jwks_refetch_budget = 2;
    })
    .await;
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW)), Ok(true));
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW + 1)), Ok(true));
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW + 2)), Err(TokenError::RefetchBudgetExhausted));
    let forged = SigningKey::ed("forged");
    let err = v.authenticate(&bearer(&forged.sign(&claims(NOW + 60))), at(NOW + 3)).await.expect_err("budget");
    assert_eq!(err, TokenError::RefetchBudgetExhausted);
    assert!(err.to_string().contains("oauth.jwks_refetch_budget"), "{err}");
    assert_eq!(v.metrics().jwks_budget_exhausted_count(), 1);
    assert_eq!(v.jwks.may_refetch_for_test(at(NOW + 30)), Ok(true), "one refetch back every 30 s");
}

#[tokio::test]
async fn unreachable_issuer_fails_closed_naming_it() {
    let key = SigningKey::ed("k");
    let v = TokenVerifier::new(&oauth(|_| {})).expect("valid config");
    let err = v.authenticate(&bearer(&key.sign(&claims(NOW + 60))), at(NOW)).await.expect_err("no issuer");
    assert!(matches!(err, TokenError::IssuerUnavailable { .. }), "{err:?}");
    assert!(err.to_string().contains(ISS), "{err}");
}

#[tokio::test]
async fn a_failed_jwks_fetch_is_remembered_for_a_second() {
    let key = SigningKey::ed("k");
    let v = TokenVerifier::new(&oauth(|_| {})).expect("valid config");
    let token = key.sign(&claims(NOW + 60));
    for t in [at(NOW), at(NOW), UnixTime(Duration::from_millis(NOW * 1000 + 999)), at(NOW - 5)] {
        let err = v.authenticate(&bearer(&token), t).await.expect_err("no issuer");
        assert!(matches!(err, TokenError::IssuerUnavailable { .. }), "{err:?}");
    }
    let fetches = |result| v.metrics().jwks_fetches_count(result);
    assert_eq!(fetches("error"), 1, "one fetch while the failure is remembered");
    v.authenticate(&bearer(&token), at(NOW + 1)).await.expect_err("still no issuer");
    assert_eq!(fetches("error"), 2, "asked again a second later");
}

#[test]
fn config_errors_name_each_field() {
    let errs = config::OAuth::try_from(oauth_raw(|r| {
        r.issuer = Some("http://auth.example.com".into());
        r.jwks_url = Some("not a url".into());
        r.fetch_timeout = config::HumanDuration(Duration::ZERO);
        r.jwks_refetch_budget = 0;
    }))
    .expect_err("invalid");
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    for f in ["oauth.issuer", "oauth.jwks_url", "oauth.fetch_timeout", "oauth.jwks_refetch_budget"] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
    let errs = config::OAuth::try_from(oauth_raw(|r| r.issuer = None)).expect_err("no issuer");
    assert_eq!(errs[0].field, "oauth.issuer");
    // The CA file is read when the stage is built, and named the same way.
    let err = TokenVerifier::new(&oauth(|r| r.issuer_ca = Some("/nonexistent/ca.pem".into()))).expect_err("unreadable CA");
    assert_eq!(err.field, "oauth.issuer_ca");
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any token68 comes back exactly from `Bearer <token68>`, whatever the scheme's case.
        #[test]
        fn bearer_token68_round_trips(token in "[A-Za-z0-9._~+/-]{1,200}={0,2}", upper in any::<bool>()) {
            let scheme = if upper { "BEARER" } else { "Bearer" };
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, HeaderValue::from_str(&format!("{scheme} {token}")).expect("ascii"));
            prop_assert_eq!(bearer_token(&h), Ok(Some(token.as_str())));
        }

        /// Arbitrary header bytes never panic, and anything accepted is a token68.
        #[test]
        fn arbitrary_authorization_is_refused_or_a_token68(value in proptest::collection::vec(0x20u8..0x7f, 0..80)) {
            let Ok(v) = HeaderValue::from_bytes(&value) else { return Ok(()) };
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, v);
            if let Ok(Some(t)) = bearer_token(&h) {
                prop_assert!(!t.is_empty() && t.trim_end_matches('=').bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)));
            }
        }
    }
}
