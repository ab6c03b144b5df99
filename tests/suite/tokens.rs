//! Stage 7, user authority: OAuth bearer tokens per the MCP Authorization spec, against a real
//! HTTPS issuer on 127.0.0.1 (metadata discovery, JWKS, introspection) and the real gateway.
//! Every denial test proves the upstream received nothing.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::issuer::{self, Issuer};
use common::keys::{self, SigningKey};
use common::pki::TestCa;
use common::{Gateway, Upstream};
use jsonwebtoken::Algorithm;
use portcullis::config::Config;
use serde_json::{json, Value};

const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

const AUD: &str = "https://mcp.example.com/mcp";
const PRM: &str = "https://mcp.example.com/.well-known/oauth-protected-resource";

struct Setup {
    _ca: TestCa,
    issuer: Issuer,
    upstream: Upstream,
    gw: Gateway,
    _log_dir: tempfile::TempDir,
    log: std::path::PathBuf,
}

impl Setup {
    /// Gateway with `[oauth]` pointing at a fresh issuer (discovery via RFC 8414 metadata);
    /// `oauth_extra` is appended inside `[oauth]`.
    async fn start(oauth_extra: &str) -> Setup {
        let extra = oauth_extra.to_owned();
        Setup::start_with("enforce", move |_| extra).await
    }

    /// In `mode`; `oauth_extra` gets the issuer, for settings that name its URLs.
    async fn start_with(mode: &str, oauth_extra: impl FnOnce(&Issuer) -> String) -> Setup {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let upstream = Upstream::start().await;
        let (log_dir, log) = common::temp_path("decisions.log");
        let oauth_extra = oauth_extra(&issuer);
        let required = if oauth_extra.contains("required =") { "" } else { "required = true\n" };
        let extra = format!(
            "[signatures]\nrequired = false\n[oauth]\n{required}issuer = \"{}\"\nissuer_ca = {:?}\nscopes_supported = [\"mcp:tools\"]\n{oauth_extra}\n",
            issuer.url(),
            ca.ca_path()
        );
        let text = common::TomlEdit::of(&common::config_toml(&upstream.url(), &extra)).set("mode", mode).set("log.decisions", log.display().to_string()).text();
        let gw = Gateway::start(Config::parse(&text, "tokens test", std::path::Path::new(".")).unwrap()).await;
        Setup { _ca: ca, issuer, upstream, gw, _log_dir: log_dir, log }
    }

    async fn call(&self, token: Option<&str>) -> reqwest::Response {
        let mut req =
            common::client().post(self.gw.url("/mcp")).header("content-type", "application/json").body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.unwrap()
    }

    /// The decision-log lines, once there are at least `n`.
    async fn log_lines(&self, n: usize) -> Vec<Value> {
        common::wait_for_decision_lines(&self.log, n).await
    }
}

async fn error_code(resp: reqwest::Response) -> String {
    let body: Value = resp.json().await.unwrap();
    body["error"].as_str().unwrap().to_owned()
}

/// 401 invalid_token with the RFC 6750 challenge, nothing forwarded.
async fn assert_invalid_token(s: &Setup, token: &str, description_part: &str) {
    let forwarded_before = s.upstream.seen().len();
    let resp = s.call(Some(token)).await;
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""), "{challenge}");
    assert!(challenge.ends_with(&format!("\", resource_metadata=\"{PRM}\"")), "{challenge}");
    assert!(challenge.contains(description_part), "{challenge} should mention {description_part}");
    assert!(!challenge.contains(token), "the token is never echoed");
    assert_eq!(resp.headers()["cache-control"], "no-store");
    assert_eq!(error_code(resp).await, "invalid_token");
    assert_eq!(s.upstream.seen().len(), forwarded_before, "upstream must receive nothing");
}

async fn assert_forwarded_as_user(s: &Setup, key: &SigningKey) {
    let token = key.sign(&s.issuer.claims(AUD));
    let resp = s.call(Some(&token)).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let seen = s.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.get("authorization").is_none(), "no token passthrough");
    assert_eq!(seen[0].headers["x-portcullis-subject"], "user-1842");
    assert_eq!(seen[0].headers["x-portcullis-scopes"], "mcp:tools files:read");
}

#[tokio::test]
async fn valid_rs256_token_is_forwarded_as_the_user_without_the_token() {
    let s = Setup::start("").await;
    assert_forwarded_as_user(&s, &s.issuer.rsa).await;
    let line = s.log_lines(1).await.pop().unwrap();
    assert_eq!(line["outcome"], "allow");
    assert_eq!(line["sub"], "user-1842");
    assert!(line["latency_us"]["token"].is_u64(), "{line}");
    assert_eq!(s.issuer.metadata_fetches(), 1, "jwks_uri discovered from RFC 8414 metadata");
}

#[tokio::test]
async fn valid_es256_token_is_forwarded() {
    let s = Setup::start("").await;
    assert_forwarded_as_user(&s, &s.issuer.ec).await;
}

#[tokio::test]
async fn valid_eddsa_token_is_forwarded() {
    let s = Setup::start("").await;
    assert_forwarded_as_user(&s, &s.issuer.ed).await;
}

#[tokio::test]
async fn repeated_token_is_a_cache_hit_and_the_jwks_is_fetched_once() {
    let s = Setup::start("").await;
    let token = s.issuer.ed.sign(&s.issuer.claims(AUD));
    for _ in 0..3 {
        assert_eq!(s.call(Some(&token)).await.status(), 200);
    }
    assert_eq!(s.upstream.seen().len(), 3);
    assert_eq!(s.issuer.jwks_fetches(), 1);
    let metrics = common::client().get(s.gw.admin_url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("portcullis_token_cache_lookups_total{result=\"hit\"} 2"), "{metrics}");
    assert!(metrics.contains("portcullis_token_cache_lookups_total{result=\"miss\"} 1"), "{metrics}");
    assert!(metrics.contains("portcullis_jwks_fetches_total{result=\"ok\"} 1"), "{metrics}");
}

#[tokio::test]
async fn spoofed_identity_headers_are_stripped_and_replaced() {
    let s = Setup::start("").await;
    let token = s.issuer.ed.sign(&s.issuer.claims(AUD));
    let resp = common::client()
        .post(s.gw.url("/mcp"))
        .bearer_auth(&token)
        .header("x-portcullis-subject", "admin")
        .header("x-portcullis-scopes", "everything")
        .body(PING)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = s.upstream.seen();
    assert_eq!(seen[0].headers.get_all("x-portcullis-subject").iter().collect::<Vec<_>>(), ["user-1842"]);
    assert_eq!(seen[0].headers.get_all("x-portcullis-scopes").iter().collect::<Vec<_>>(), ["mcp:tools files:read"]);
}

#[tokio::test]
async fn spoofed_identity_headers_without_a_token_never_reach_the_upstream() {
    let s = Setup::start("required = false").await;
    let resp = common::client().post(s.gw.url("/mcp")).header("x-portcullis-subject", "admin").body(PING).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let seen = s.upstream.seen();
    assert!(seen[0].headers.get("x-portcullis-subject").is_none());
    assert!(seen[0].headers.get("x-portcullis-scopes").is_none());
}

#[tokio::test]
async fn forward_token_true_passes_the_verified_token_upstream() {
    let s = Setup::start("forward_token = true").await;
    let token = s.issuer.rsa.sign(&s.issuer.claims(AUD));
    assert_eq!(s.call(Some(&token)).await.status(), 200);
    assert_eq!(s.upstream.seen()[0].headers["authorization"], format!("Bearer {token}"));
}

#[tokio::test]
async fn expired_token_is_401_invalid_token_and_not_forwarded() {
    let s = Setup::start("").await;
    let now = issuer::unix_now();
    let token = s.issuer.rsa.sign(&s.issuer.claims_with(AUD, json!({"exp": now - 120, "iat": now - 600, "nbf": now - 600})));
    assert_invalid_token(&s, &token, "expired").await;
}

#[tokio::test]
async fn not_yet_valid_token_is_401() {
    let s = Setup::start("").await;
    let token = s.issuer.ec.sign(&s.issuer.claims_with(AUD, json!({"nbf": issuer::unix_now() + 600})));
    assert_invalid_token(&s, &token, "not valid before").await;
}

#[tokio::test]
async fn token_from_another_issuer_is_401() {
    let s = Setup::start("").await;
    let token = s.issuer.ed.sign(&s.issuer.claims_with(AUD, json!({"iss": "https://evil.example"})));
    assert_invalid_token(&s, &token, "issuer").await;
}

#[tokio::test]
async fn token_minted_for_another_resource_is_401() {
    let s = Setup::start("").await;
    let token = s.issuer.ed.sign(&s.issuer.claims("https://other-mcp.example.com/mcp"));
    assert_invalid_token(&s, &token, "audience does not include https://mcp.example.com/mcp").await;
}

#[tokio::test]
async fn rotated_issuer_key_is_picked_up_without_restart() {
    let s = Setup::start("").await;
    assert_eq!(s.call(Some(&s.issuer.ed.sign(&s.issuer.claims(AUD)))).await.status(), 200);
    // The issuer rotates: a new key with a new kid replaces every old one.
    let rotated = SigningKey::ed("ed-2");
    s.issuer.publish(&[&rotated]);
    let resp = s.call(Some(&rotated.sign(&s.issuer.claims(AUD)))).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert_eq!(s.issuer.jwks_fetches(), 2, "one refetch for the unknown kid");
    assert_eq!(s.upstream.seen().len(), 2);
    // The retired key is gone from the fresh set; a new token signed with it is refused.
    let old = s.issuer.ed.sign(&s.issuer.claims_with(AUD, json!({"jti": "other"})));
    let resp = s.call(Some(&old)).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(error_code(resp).await, "invalid_token");
    assert_eq!(s.upstream.seen().len(), 2);
}

#[tokio::test]
async fn forged_kids_cause_at_most_one_refetch() {
    let s = Setup::start("").await;
    for i in 0..5 {
        let forged = SigningKey::ed("ed-1").with_kid(&format!("forged-{i}"));
        assert_invalid_token(&s, &forged.sign(&s.issuer.claims(AUD)), "no issuer key matches the token's kid").await;
    }
    assert_eq!(s.issuer.jwks_fetches(), 2, "the first fetch and one rate-limited refetch");
}

/// Finding 2, issuer side: whatever `oauth.jwks_refetch_interval` allows (here almost every
/// request), unknown kids cause at most `oauth.jwks_refetch_budget` refetches a minute.
#[tokio::test]
async fn forged_kids_beyond_the_refetch_budget_cause_no_fetch() {
    let s = Setup::start("jwks_refetch_interval = \"1ms\"\njwks_refetch_budget = 3").await;
    let mut refused_by_budget = 0;
    for i in 0..20 {
        // Past the 1 ms interval on any clock.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let forged = SigningKey::ed("ed-1").with_kid(&format!("forged-{i}"));
        let resp = s.call(Some(&forged.sign(&s.issuer.claims(AUD)))).await;
        assert_eq!(resp.status(), 401);
        let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
        assert!(!challenge.contains("forged"), "the client's kid is not quoted: {challenge}");
        if challenge.contains("oauth.jwks_refetch_budget") {
            refused_by_budget += 1;
        }
    }
    // The first fetch, then 3 refetches (a slow run may earn one more: 3 a minute).
    assert!(s.issuer.jwks_fetches() <= 5, "{} JWKS fetches for 20 forged kids", s.issuer.jwks_fetches());
    assert!(refused_by_budget >= 15, "{refused_by_budget}");
    assert!(s.upstream.seen().is_empty());
    let metrics = common::client().get(s.gw.admin_url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(&format!("portcullis_jwks_refetch_budget_exhausted_total {refused_by_budget}")), "{metrics}");
}

/// Finding 3: a token whose claims decode to a JSON string was refused with the decoded claims
/// in the reason, the decision log and `WWW-Authenticate`.
#[tokio::test]
async fn token_whose_claims_are_a_json_string_is_refused_without_quoting_them() {
    let s = Setup::start("").await;
    let header = keys::b64(br#"{"alg":"EdDSA","typ":"at+jwt","kid":"ed-1"}"#);
    let claims = serde_json::Value::String(s.issuer.claims(AUD).to_string()).to_string();
    let token = format!("{header}.{}.c2lnbmF0dXJl", keys::b64(claims.as_bytes()));
    let resp = s.call(Some(&token)).await;
    assert_eq!(resp.status(), 401);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains("claims are not a JSON object"), "{challenge}");
    let body: Value = resp.json().await.unwrap();
    let line = s.log_lines(1).await.pop().unwrap();
    for text in [challenge.as_str(), body["reason"].as_str().unwrap(), &line.to_string()] {
        assert!(!text.contains("user-1842") && !text.contains("mcp:tools"), "the claims leaked: {text}");
    }
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test]
async fn alg_none_token_is_401_without_asking_the_issuer() {
    let s = Setup::start("").await;
    assert_invalid_token(&s, &keys::unsigned("ed-1", &s.issuer.claims(AUD)), "\\\"none\\\" is not accepted").await;
    assert_eq!(s.issuer.jwks_fetches(), 0);
}

#[tokio::test]
async fn hmac_token_keyed_with_the_issuer_public_key_is_401() {
    let s = Setup::start("").await;
    // Algorithm confusion: HS256 with the RSA public key (as JWK JSON and as its modulus) as secret.
    for secret in [s.issuer.rsa.jwk.to_string(), s.issuer.rsa.jwk["n"].as_str().unwrap().to_owned()] {
        assert_invalid_token(&s, &keys::hmac("rsa-1", secret.as_bytes(), &s.issuer.claims(AUD)), "HS256").await;
    }
}

#[tokio::test]
async fn ps256_with_an_rs256_only_key_is_401() {
    let s = Setup::start("").await;
    let rs256_only = s.issuer.rsa.clone().with_alg(Algorithm::RS256);
    s.issuer.publish(&[&rs256_only]);
    let ps = rs256_only.clone().with_alg(Algorithm::PS256);
    assert_invalid_token(&s, &ps.sign(&s.issuer.claims(AUD)), "cannot verify PS256").await;
}

#[tokio::test]
async fn missing_token_is_401_with_the_exact_mcp_challenge() {
    let s = Setup::start("").await;
    let resp = s.call(None).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], format!("Bearer resource_metadata=\"{PRM}\", scope=\"mcp:tools\""));
    assert_eq!(error_code(resp).await, "oauth_required");
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test]
async fn token_in_the_query_string_is_never_used() {
    let s = Setup::start("").await;
    let token = s.issuer.ed.sign(&s.issuer.claims(AUD));
    let resp = common::client().post(s.gw.url(&format!("/mcp?access_token={token}"))).body(PING).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.starts_with("Bearer error=\"invalid_request\", error_description=\""), "{challenge}");
    assert_eq!(error_code(resp).await, "invalid_request");
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test]
async fn malformed_authorization_header_is_400_invalid_request() {
    let s = Setup::start("").await;
    for value in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer a b"] {
        let resp = common::client().post(s.gw.url("/mcp")).header("authorization", value).body(PING).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{value}");
        assert_eq!(error_code(resp).await, "invalid_request");
    }
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test]
async fn issuer_down_fails_closed_with_503_naming_the_issuer() {
    let mut s = Setup::start("").await;
    let token = s.issuer.rsa.sign(&s.issuer.claims(AUD));
    s.issuer.stop();
    let resp = s.call(Some(&token)).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "issuer_unavailable");
    assert!(body["reason"].as_str().unwrap().contains(&s.issuer.url()), "{body}");
    assert!(s.upstream.seen().is_empty());
    let metrics = common::client().get(s.gw.admin_url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("portcullis_jwks_fetches_total{result=\"error\"} 1"), "{metrics}");
}

/// `[oauth.introspection]` at the test issuer, with the client it accepts.
fn introspection(i: &Issuer) -> String {
    format!("[oauth.introspection]\nurl = \"{}/introspect\"\nclient_id = \"{}\"\nclient_secret = \"{}\"\n", i.url(), issuer::CLIENT_ID, issuer::CLIENT_SECRET)
}

#[tokio::test]
async fn opaque_tokens_are_introspected_active_forwarded_inactive_refused() {
    let s = Setup::start_with("enforce", introspection).await;
    let exp = issuer::unix_now() + 300;
    s.issuer.register_opaque("opaque-active-1", json!({"active": true, "sub": "user-7", "aud": AUD, "exp": exp, "scope": "mcp:tools", "client_id": "c1"}));
    s.issuer.register_opaque("opaque-other-aud", json!({"active": true, "sub": "user-7", "aud": "https://other.example", "exp": exp}));
    for _ in 0..2 {
        assert_eq!(s.call(Some("opaque-active-1")).await.status(), 200);
    }
    assert_eq!(s.issuer.introspection_calls(), 1, "the active result is cached");
    let seen = s.upstream.seen();
    assert_eq!(seen[1].headers["x-portcullis-subject"], "user-7");
    assert_eq!(seen[1].headers["x-portcullis-scopes"], "mcp:tools");
    assert_invalid_token(&s, "opaque-revoked", "not active").await;
    assert_invalid_token(&s, "opaque-other-aud", "audience").await;
    let line = serde_json::to_string(&s.log_lines(4).await).unwrap();
    assert!(!line.contains(issuer::CLIENT_SECRET) && !line.contains("opaque-active-1"), "no secrets in the decision log");
}

#[tokio::test]
async fn monitor_mode_forwards_a_bad_token_and_logs_would_deny() {
    let s = Setup::start_with("monitor", |_| String::new()).await;
    let now = issuer::unix_now();
    let token = s.issuer.ed.sign(&s.issuer.claims_with(AUD, json!({"exp": now - 120, "iat": now - 600, "nbf": now - 600})));
    assert_eq!(s.call(Some(&token)).await.status(), 200);
    let seen = s.upstream.seen();
    assert_eq!(seen.len(), 1, "monitor mode forwards");
    assert!(seen[0].headers.get("authorization").is_none());
    assert!(seen[0].headers.get("x-portcullis-subject").is_none(), "an unverified user is never asserted");
    let line = s.log_lines(1).await.pop().unwrap();
    assert_eq!(line["outcome"], "would_deny");
    assert_eq!(line["error"], "invalid_token");
    assert!(line["sub"].is_null());
}

#[tokio::test]
async fn optional_oauth_passes_without_a_token_but_verifies_a_sent_one() {
    let s = Setup::start("required = false").await;
    assert_eq!(s.call(None).await.status(), 200);
    assert_eq!(s.upstream.seen().len(), 1);
    let bad = s.issuer.ed.sign(&s.issuer.claims("https://other.example/mcp"));
    let resp = s.call(Some(&bad)).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(error_code(resp).await, "invalid_token");
    assert_eq!(s.upstream.seen().len(), 1, "the bad token was not forwarded");
}

#[tokio::test]
async fn protected_resource_metadata_lists_issuer_scopes_and_header_method() {
    let s = Setup::start("").await;
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let resp = common::client().get(s.gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let doc: Value = resp.json().await.unwrap();
        assert_eq!(doc["resource"], AUD);
        assert_eq!(doc["authorization_servers"], json!([s.issuer.url()]));
        assert_eq!(doc["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test]
async fn oauth_required_without_an_issuer_is_refused_at_start_naming_the_field() {
    let text = common::config_toml("http://127.0.0.1:1", "[signatures]\nrequired = false\n[oauth]\nrequired = true\n");
    // Checked once, with the rest of the file: the config does not load, so nothing starts.
    let err = Config::parse(&text, "tokens test", std::path::Path::new(".")).unwrap_err().to_string();
    assert!(err.contains("oauth.issuer: required to verify bearer tokens"), "{err}");
}

#[tokio::test]
async fn oversized_jwks_is_not_read_and_fails_closed() {
    let s = Setup::start("").await;
    s.issuer.pad_jwks(1 << 20);
    let resp = s.call(Some(&s.issuer.ed.sign(&s.issuer.claims(AUD)))).await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert!(body["reason"].as_str().unwrap().contains("larger than"), "{body}");
    assert!(s.upstream.seen().is_empty());
}

#[tokio::test]
async fn an_opaque_token_found_inactive_is_refused_again_without_another_introspection_call() {
    let s = Setup::start_with("enforce", introspection).await;
    // An attacker repeating a made-up (or revoked) opaque token: the issuer says inactive once.
    for _ in 0..5 {
        assert_invalid_token(&s, "opaque-made-up-by-an-attacker", "not active").await;
    }
    assert_eq!(s.issuer.introspection_calls(), 1, "an inactive token is remembered (by its hash) for a short while");
    // Another bad token is its own entry: it is asked about once too.
    assert_invalid_token(&s, "opaque-another-made-up-one", "not active").await;
    assert_eq!(s.issuer.introspection_calls(), 2);
    let metrics = common::client().get(s.gw.admin_url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("portcullis_token_cache_lookups_total{result=\"inactive_hit\"} 4"), "{metrics}");
    assert!(!metrics.contains("opaque-made-up"), "never the token itself");
}
