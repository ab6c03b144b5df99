//! Sender-constrained tokens (RFC 9449 DPoP) at the real gateway, against a real HTTPS issuer
//! on 127.0.0.1 whose tokens carry `cnf.jkt`: a token bound to a key is spent only with a
//! fresh proof by that key, for this request, once (also across two instances on one Redis);
//! a proof by the agent's own signing key binds the token to the agent (`agent_key`). Proofs
//! are made by the agent library and by jsonwebtoken (an implementation that is not ours).
//! Every refusal test proves the upstream received nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use crate::common;

use common::issuer::{unix_now, Issuer};
use common::keys::SigningKey;
use common::pki::TestCa;
use common::redis::RedisServer;
use common::{Gateway, Upstream};
use ed25519_dalek::SigningKey as AgentKey;
use jsonwebtoken::Algorithm;
use portcullis::config::Config;
use portcullis_wire::dpop::ed25519_proof;
use portcullis_wire::signature::{ed25519_public_jwk, ed25519_thumbprint, Signer};
use portcullis_wire::UnixTime;
use serde_json::{json, Value};

const AUD: &str = "https://mcp.example.com/mcp";
const HTU: &str = "https://mcp.example.com/mcp";
const AGENT: &str = "https://agent.example";
const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
const ALGS: &str = r#"algs="ES256 EdDSA Ed25519 RS256 PS256""#;

fn agent_key() -> AgentKey {
    AgentKey::from_bytes(&rand::random())
}

struct Setup {
    _ca: TestCa,
    issuer: Issuer,
    upstream: Upstream,
    gw: Gateway,
    /// The agent whose Ed25519 key is a static `[[signatures.keys]]` entry.
    agent: AgentKey,
    _log_dir: tempfile::TempDir,
    log: std::path::PathBuf,
    /// The config after `[log]`, for a second instance.
    extra: String,
}

/// What a test changes in the gateway.
#[derive(Default)]
struct Options<'a> {
    monitor: bool,
    /// Appended inside `[oauth]` (after `dpop = true`).
    oauth: &'a str,
    /// `state.store`.
    redis: Option<String>,
}

impl Setup {
    async fn start(oauth: &str) -> Setup {
        Setup::with(Options { oauth, ..Options::default() }).await
    }

    async fn with(o: Options<'_>) -> Setup {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let agent = agent_key();
        let upstream = Upstream::start().await;
        let (log_dir, log) = common::temp_path("decisions.log");
        let x = ed25519_public_jwk(&agent.verifying_key())["x"].as_str().unwrap().to_owned();
        let state = o.redis.map(|url| format!("[state]\nstore = {url:?}\n")).unwrap_or_default();
        let extra = format!(
            "[signatures]\nrequired = false\n[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {x:?} }}\n\
             [oauth]\nrequired = true\nissuer = {:?}\nissuer_ca = {:?}\nscopes_supported = [\"mcp:tools\"]\ndpop = true\n{}\n{state}",
            issuer.url(),
            ca.ca_path(),
            o.oauth,
        );
        let mode = if o.monitor { "monitor" } else { "enforce" };
        let text = common::TomlEdit::of(&common::config_toml(&upstream.url(), &extra)).set("mode", mode).set("log.decisions", log.display().to_string()).text();
        let gw = Gateway::start(Config::parse(&text, "dpop test", std::path::Path::new(".")).unwrap()).await;
        Setup { _ca: ca, issuer, upstream, gw, agent, _log_dir: log_dir, log, extra }
    }

    /// Another gateway with the same settings (issuer, agent, store), in front of its own upstream.
    async fn second_instance(&self) -> (Gateway, Upstream) {
        let upstream = Upstream::start().await;
        let text = common::config_toml(&upstream.url(), &self.extra);
        (Gateway::start(Config::parse(&text, "dpop test", std::path::Path::new(".")).unwrap()).await, upstream)
    }

    /// A token bound to the key of thumbprint `jkt`, signed by the issuer's RSA key.
    fn bound_token(&self, jkt: &str) -> String {
        self.issuer.rsa.sign(&self.issuer.bound_claims(AUD, jkt))
    }

    /// POST /mcp with these headers (and, with `signed`, the agent's HTTP Message Signature).
    async fn post(&self, headers: &[(&str, String)], signed: bool) -> reqwest::Response {
        self.post_to(&self.gw, headers, signed).await
    }

    async fn post_to(&self, gw: &Gateway, headers: &[(&str, String)], signed: bool) -> reqwest::Response {
        let mut req = http::Request::builder().method("POST").uri(gw.url("/mcp")).header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let mut req = req.body(BODY.as_bytes().to_vec()).unwrap();
        if signed {
            Signer::new(self.agent.clone(), AGENT).unwrap().sign_request(&mut req, UnixTime::now()).unwrap();
        }
        let (parts, body) = req.into_parts();
        common::client().post(gw.url("/mcp")).headers(parts.headers).body(body).send().await.unwrap()
    }

    /// `Authorization: DPoP <token>` with `proof`.
    async fn dpop(&self, token: &str, proof: &str, signed: bool) -> reqwest::Response {
        self.dpop_to(&self.gw, token, proof, signed).await
    }

    async fn dpop_to(&self, gw: &Gateway, token: &str, proof: &str, signed: bool) -> reqwest::Response {
        self.post_to(gw, &[("authorization", format!("DPoP {token}")), ("dpop", proof.to_owned())], signed).await
    }

    async fn log_lines(&self, n: usize) -> Vec<Value> {
        common::wait_for_decision_lines(&self.log, n).await
    }
}

/// 401 with `code`, the DPoP challenge carrying that error, nothing forwarded, no credential
/// echoed.
async fn assert_refused(s: &Setup, resp: reqwest::Response, code: &str, description_part: &str, secrets: &[&str]) {
    assert_eq!(resp.status(), 401, "{code}");
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], code, "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains(description_part), "{reason:?} should mention {description_part:?}");
    for secret in secrets {
        assert!(!challenge.contains(secret) && !reason.contains(secret), "a token or proof is never echoed: {challenge} / {reason}");
    }
    if code == "invalid_dpop_proof" {
        assert!(challenge.starts_with("DPoP error=\"invalid_dpop_proof\", error_description=\""), "{challenge}");
        assert!(challenge.ends_with(ALGS), "{challenge}");
    }
    assert!(s.upstream.seen().is_empty(), "upstream must receive nothing");
}

#[tokio::test]
async fn a_bound_token_with_a_valid_proof_is_forwarded_as_the_user_and_logged_as_dpop() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    let resp = s.dpop(&token, &key.dpop_proof("POST", HTU, &token, unix_now()), false).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let seen = s.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.get("authorization").is_none() && seen[0].headers.get("dpop").is_none(), "neither token nor proof upstream");
    assert_eq!(seen[0].headers["x-portcullis-subject"], "user-1842");
    let line = s.log_lines(1).await.pop().unwrap();
    assert_eq!((line["outcome"].as_str(), line["binding"].as_str()), (Some("allow"), Some("dpop")), "{line}");
    let metrics = common::metrics(&s.gw).await;
    assert!(metrics.contains("token_bindings_total{binding=\"dpop\"} 1"), "{metrics}");
}

#[tokio::test]
async fn a_proof_by_the_agents_own_signing_key_binds_the_token_to_the_agent() {
    let s = Setup::start("").await;
    let jkt = ed25519_thumbprint(&s.agent.verifying_key());
    let token = s.bound_token(&jkt);
    let resp = s.dpop(&token, &ed25519_proof(&s.agent, "POST", HTU, &token, unix_now()), true).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert_eq!(s.upstream.seen()[0].headers["x-portcullis-agent"], AGENT);
    let line = s.log_lines(1).await.pop().unwrap();
    assert_eq!(line["binding"], "agent_key", "{line}");
    assert_eq!(line["keyid"].as_str(), Some(jkt.as_str()), "the agent's keyid is the token's cnf.jkt");
    // The same proof key without the HTTP Message Signature is a plain DPoP binding.
    let resp = s.dpop(&token, &ed25519_proof(&s.agent, "POST", HTU, &token, unix_now()), false).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(s.log_lines(2).await[1]["binding"], "dpop");
}

#[tokio::test]
async fn require_agent_key_binding_refuses_a_proof_by_any_other_key() {
    let s = Setup::start("require_agent_key_binding = true").await;
    let other = SigningKey::ed("other");
    let token = s.bound_token(&other.thumbprint());
    let proof = other.dpop_proof("POST", HTU, &token, unix_now());
    assert_refused(&s, s.dpop(&token, &proof, true).await, "invalid_dpop_proof", "proof key is not the agent's signing key", &[&token, &proof]).await;
    // The agent's own key passes.
    let token = s.bound_token(&ed25519_thumbprint(&s.agent.verifying_key()));
    let resp = s.dpop(&token, &ed25519_proof(&s.agent, "POST", HTU, &token, unix_now()), true).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
}

#[tokio::test]
async fn a_replayed_proof_is_refused() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    let proof = key.dpop_proof("POST", HTU, &token, unix_now());
    assert_eq!(s.dpop(&token, &proof, false).await.status(), 200);
    let resp = s.dpop(&token, &proof, false).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.json::<Value>().await.unwrap()["reason"], "invalid DPoP proof: proof jti was already used");
    assert_eq!(s.upstream.seen().len(), 1, "the copy was not forwarded");
}

#[tokio::test]
async fn a_proof_is_accepted_once_across_two_instances_on_one_redis() {
    let redis = RedisServer::start();
    let a = Setup::with(Options { redis: Some(redis.url()), ..Options::default() }).await;
    let (b, b_upstream) = a.second_instance().await;
    let key = SigningKey::ec("proof-key");
    let token = a.bound_token(&key.thumbprint());
    // Many copies of one proof, raced at both instances: exactly one passes.
    let proof = key.dpop_proof("POST", HTU, &token, unix_now());
    let sends = (0..8).map(|i| {
        let (gw, token, proof, a) = (if i % 2 == 0 { &a.gw } else { &b }, token.clone(), proof.clone(), &a);
        async move { a.dpop_to(gw, &token, &proof, false).await.status().as_u16() }
    });
    let statuses = futures_util::future::join_all(sends).await;
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 401), "{statuses:?}");
    assert_eq!(a.upstream.seen().len() + b_upstream.seen().len(), 1);
    // A new proof for the same token passes at either.
    assert_eq!(a.dpop_to(&b, &token, &key.dpop_proof("POST", HTU, &token, unix_now()), false).await.status(), 200);
}

#[tokio::test]
async fn a_proof_for_another_method_or_url_is_refused() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    for (htm, htu, why) in [
        ("GET", HTU, "htm does not match the request method"),
        ("POST", "https://mcp.example.com/other", "htu does not match the request"),
        ("POST", "https://evil.example/mcp", "htu does not match the request"),
        ("POST", "https://mcp.example.com:8443/mcp", "htu does not match the request"),
    ] {
        let proof = key.dpop_proof(htm, htu, &token, unix_now());
        assert_refused(&s, s.dpop(&token, &proof, false).await, "invalid_dpop_proof", why, &[&token, &proof]).await;
    }
    // RFC 9449 §4.3 normalisation: case, default port, query and fragment do not matter.
    let proof = key.dpop_proof("POST", "HTTPS://MCP.Example.com:443/mcp?x=1#f", &token, unix_now());
    assert_eq!(s.dpop(&token, &proof, false).await.status(), 200);
}

#[tokio::test]
async fn a_proof_too_old_or_from_the_future_is_refused() {
    let s = Setup::start("dpop_max_age = \"60s\"").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    let old = key.dpop_proof("POST", HTU, &token, unix_now() - 60 - 30 - 5);
    assert_refused(&s, s.dpop(&token, &old, false).await, "invalid_dpop_proof", "proof is too old", &[&token, &old]).await;
    let future = key.dpop_proof("POST", HTU, &token, unix_now() + 300);
    assert_refused(&s, s.dpop(&token, &future, false).await, "invalid_dpop_proof", "proof issued in the future", &[&token, &future]).await;
}

#[tokio::test]
async fn proofs_signed_with_none_or_hs256_are_refused() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    let good = key.dpop_proof("POST", HTU, &token, unix_now());
    let (header, rest) = good.split_once('.').unwrap();
    let (claims, _) = rest.split_once('.').unwrap();
    let mut h: Value = serde_json::from_slice(&base64_decode(header)).unwrap();
    h["alg"] = json!("none");
    let none = format!("{}.{claims}.", common::keys::b64(h.to_string().as_bytes()));
    assert_refused(&s, s.dpop(&token, &none, false).await, "invalid_dpop_proof", "proof algorithm \"none\" is not accepted", &[&token]).await;
    // HS256 with the public key as the secret: the algorithm-confusion attack.
    let mut hs = jsonwebtoken::Header::new(Algorithm::HS256);
    hs.typ = Some("dpop+jwt".into());
    hs.jwk = key.dpop_header().jwk;
    let claims: Value = serde_json::from_slice(&base64_decode(claims)).unwrap();
    let hmac = jsonwebtoken::encode(&hs, &claims, &jsonwebtoken::EncodingKey::from_secret(key.jwk.to_string().as_bytes()).unwrap()).unwrap();
    assert_refused(&s, s.dpop(&token, &hmac, false).await, "invalid_dpop_proof", "proof algorithm \"HS256\" is not accepted", &[&token, &hmac]).await;
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap()
}

#[tokio::test]
async fn a_private_key_in_the_proof_header_is_refused() {
    let s = Setup::start("").await;
    let jkt = ed25519_thumbprint(&s.agent.verifying_key());
    let token = s.bound_token(&jkt);
    let good = ed25519_proof(&s.agent, "POST", HTU, &token, unix_now());
    let (header, rest) = good.split_once('.').unwrap();
    let (claims, _) = rest.split_once('.').unwrap();
    let mut h: Value = serde_json::from_slice(&base64_decode(header)).unwrap();
    h["jwk"]["d"] = json!(common::keys::b64(s.agent.as_bytes()));
    let input = format!("{}.{claims}", common::keys::b64(h.to_string().as_bytes()));
    let sig = ed25519_dalek::Signer::sign(&s.agent, input.as_bytes());
    let leaked = format!("{input}.{}", common::keys::b64(&sig.to_bytes()));
    let d = common::keys::b64(s.agent.as_bytes());
    assert_refused(&s, s.dpop(&token, &leaked, false).await, "invalid_dpop_proof", "proof jwk contains a private key", &[&token, &d]).await;
}

#[tokio::test]
async fn a_proof_for_another_token_is_refused() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    let other_token = s.issuer.ec.sign(&s.issuer.bound_claims(AUD, &key.thumbprint()));
    let proof = key.dpop_proof("POST", HTU, &other_token, unix_now());
    assert_refused(&s, s.dpop(&token, &proof, false).await, "invalid_dpop_proof", "ath does not match the access token", &[&token, &proof]).await;
}

#[tokio::test]
async fn a_token_bound_to_another_key_is_refused_with_the_dpop_invalid_token_challenge() {
    let s = Setup::start("").await;
    let (holder, thief) = (SigningKey::ec("holder"), SigningKey::ec("thief"));
    let token = s.bound_token(&holder.thumbprint());
    let proof = thief.dpop_proof("POST", HTU, &token, unix_now());
    let resp = s.dpop(&token, &proof, false).await;
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert_eq!(challenge, format!("DPoP error=\"invalid_token\", error_description=\"DPoP proof key does not match the token's cnf.jkt\", {ALGS}"));
    assert_refused(&s, resp, "invalid_token", "does not match the token's cnf.jkt", &[&token, &proof]).await;
}

#[tokio::test]
async fn a_bound_token_presented_as_bearer_is_refused() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    // Even with a valid proof beside it: the scheme says bearer (RFC 9449 §7.2).
    let proof = key.dpop_proof("POST", HTU, &token, unix_now());
    let resp = s.post(&[("authorization", format!("Bearer {token}")), ("dpop", proof.clone())], false).await;
    let challenge = resp.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.starts_with("Bearer error=\"invalid_token\", error_description=\"token is bound to a key"), "{challenge}");
    assert!(challenge.ends_with(&format!(", DPoP {ALGS}")), "{challenge}");
    assert_refused(&s, resp, "invalid_token", "send it with Authorization: DPoP", &[&token, &proof]).await;
}

#[tokio::test]
async fn without_a_token_both_schemes_are_offered_and_the_metadata_lists_the_algorithms() {
    let s = Setup::start("").await;
    let resp = s.post(&[], false).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()["www-authenticate"],
        format!("Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource\", scope=\"mcp:tools\", DPoP {ALGS}").as_str()
    );
    let prm: Value = common::client().get(s.gw.url("/.well-known/oauth-protected-resource")).send().await.unwrap().json().await.unwrap();
    assert_eq!(prm["dpop_signing_alg_values_supported"], json!(["ES256", "EdDSA", "Ed25519", "RS256", "PS256"]));
    assert_eq!(prm["dpop_bound_access_tokens_required"], false);
}

#[tokio::test]
async fn the_dpop_scheme_without_a_proof_is_refused() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    let resp = s.post(&[("authorization", format!("DPoP {token}"))], false).await;
    assert_refused(&s, resp, "invalid_dpop_proof", "the DPoP scheme needs a DPoP proof header", &[&token]).await;
}

#[tokio::test]
async fn require_sender_constrained_refuses_bearer_tokens_and_allows_bound_ones() {
    let s = Setup::start("require_sender_constrained = true").await;
    let bearer = s.issuer.rsa.sign(&s.issuer.claims(AUD));
    let resp = s.post(&[("authorization", format!("Bearer {bearer}"))], false).await;
    assert_refused(&s, resp, "invalid_token", "token is not sender-constrained", &[&bearer]).await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    assert_eq!(s.dpop(&token, &key.dpop_proof("POST", HTU, &token, unix_now()), false).await.status(), 200);
}

#[tokio::test]
async fn a_cached_token_is_still_checked_against_each_proof() {
    let s = Setup::start("").await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    assert_eq!(s.dpop(&token, &key.dpop_proof("POST", HTU, &token, unix_now()), false).await.status(), 200);
    // The token's verification is cached now; the binding is not.
    let resp = s.post(&[("authorization", format!("Bearer {token}"))], false).await;
    assert_eq!(resp.status(), 401);
    let thief = SigningKey::ec("thief");
    let resp = s.dpop(&token, &thief.dpop_proof("POST", HTU, &token, unix_now()), false).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(s.upstream.seen().len(), 1);
    let metrics = common::metrics(&s.gw).await;
    assert!(metrics.contains("token_cache_lookups_total{result=\"hit\"} 2"), "{metrics}");
}

#[tokio::test]
async fn monitor_mode_forwards_an_invalid_proof_and_logs_the_finding() {
    let s = Setup::with(Options { monitor: true, ..Options::default() }).await;
    let (holder, thief) = (SigningKey::ec("holder"), SigningKey::ec("thief"));
    let token = s.bound_token(&holder.thumbprint());
    let proof = thief.dpop_proof("GET", HTU, &token, unix_now());
    let resp = s.dpop(&token, &proof, false).await;
    assert_eq!(resp.status(), 200, "monitor mode blocks nothing");
    let seen = s.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.get("x-portcullis-subject").is_none(), "an unproven token names no user upstream");
    let line = s.log_lines(1).await.pop().unwrap();
    assert_eq!(line["outcome"], "would_deny");
    assert_eq!(line["error"], "invalid_dpop_proof");
    assert_eq!(line["findings"][0]["stage"], "token");
    assert!(line["binding"].is_null(), "{line}");
    let text = std::fs::read_to_string(&s.log).unwrap();
    assert!(!text.contains(&token) && !text.contains(&proof), "the log never holds a token or proof");
}

#[tokio::test]
async fn policy_sees_the_binding() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("binding.rego"),
        "package portcullis\nimport rego.v1\ndefault decision := {\"allow\": false, \"reason\": \"agent_key_binding_required\"}\n\
         decision := {\"allow\": true} if input.token.binding == \"agent_key\"\n",
    )
    .unwrap();
    let s = Setup::start(&format!("[policy]\npaths = [{:?}]\n", dir.path())).await;
    let key = SigningKey::ec("proof-key");
    let token = s.bound_token(&key.thumbprint());
    let resp = s.dpop(&token, &key.dpop_proof("POST", HTU, &token, unix_now()), false).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(resp.json::<Value>().await.unwrap()["reason"], "agent_key_binding_required");
    let token = s.bound_token(&ed25519_thumbprint(&s.agent.verifying_key()));
    let resp = s.dpop(&token, &ed25519_proof(&s.agent, "POST", HTU, &token, unix_now()), true).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
}

#[tokio::test]
async fn proofs_from_jsonwebtoken_in_every_accepted_algorithm_interoperate() {
    let s = Setup::start("").await;
    for key in [SigningKey::ec("es"), SigningKey::ed("ed"), SigningKey::rsa("rs"), SigningKey::rsa("ps").with_alg(Algorithm::PS256)] {
        let token = s.bound_token(&key.thumbprint());
        let resp = s.dpop(&token, &key.dpop_proof("POST", HTU, &token, unix_now()), false).await;
        assert_eq!(resp.status(), 200, "{:?}: {:?}", key.alg, resp.text().await);
    }
    assert_eq!(s.upstream.seen().len(), 4);
}

#[test]
fn the_dpop_settings_are_checked_naming_the_field() {
    let bad = [
        ("dpop = false\nrequire_agent_key_binding = true", "oauth.require_agent_key_binding"),
        ("dpop = false\nrequire_sender_constrained = true", "oauth.require_sender_constrained"),
        ("dpop = true\ndpop_max_age = \"0s\"", "oauth.dpop_max_age"),
        ("dpop = true\ndpop_max_age = \"2h\"", "oauth.dpop_max_age"),
    ];
    for (oauth, field) in bad {
        let text = common::config_toml("http://127.0.0.1:9", &format!("[oauth]\nrequired = false\n{oauth}\n"));
        let err = Config::parse(&text, "dpop test", std::path::Path::new(".")).expect_err(oauth).to_string();
        assert!(err.contains(field), "{oauth}: {err}");
    }
}

#[tokio::test]
async fn the_agent_library_binds_its_users_token_to_its_own_key() {
    let s = Setup::start("require_agent_key_binding = true").await;
    let token = s.bound_token(&ed25519_thumbprint(&s.agent.verifying_key()));
    // The gateway is reached at 127.0.0.1; its public URL is what proofs name.
    let agent = portcullis_client::Agent::new(s.agent.clone(), AGENT).unwrap().with_token(token.clone()).with_dpop_public_url(HTU);
    let resp = agent.post_json(&s.gw.url("/mcp"), &serde_json::from_str(BODY).unwrap()).await.unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    // Every call makes a new proof: the same call again is not a replay.
    assert_eq!(agent.post_json(&s.gw.url("/mcp"), &serde_json::from_str(BODY).unwrap()).await.unwrap().status(), 200);
    let lines = s.log_lines(2).await;
    assert!(lines.iter().all(|l| l["binding"] == "agent_key"), "{lines:?}");
    // Without the public URL the proof names the address it was sent to: not this resource.
    let stray = portcullis_client::Agent::new(s.agent.clone(), AGENT).unwrap().with_token(token).with_dpop();
    let resp = stray.post_json(&s.gw.url("/mcp"), &serde_json::from_str(BODY).unwrap()).await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.json::<Value>().await.unwrap()["reason"], "invalid DPoP proof: htu does not match the request");
}

#[tokio::test]
async fn portcullis_request_dpop_sends_an_eddsa_proof_by_the_agents_key() {
    let s = Setup::start("require_agent_key_binding = true").await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("agent.jwk");
    std::fs::write(&key_file, portcullis_client::private_jwk(&s.agent).to_string()).unwrap();
    let token = s.bound_token(&ed25519_thumbprint(&s.agent.verifying_key()));
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["request", "-v", "--key", key_file.to_str().unwrap(), "--agent", AGENT, "--token-file", token_file.to_str().unwrap()])
        .args(["--dpop", "--dpop-htu", HTU, "--mcp", "tools/list", &s.gw.url("/mcp")])
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.starts_with("HTTP/1.1 200 OK\n"), "{stdout}");
    assert!(stderr.contains("authorization: DPoP [redacted]") && stderr.contains("dpop: [proof]"), "{stderr}");
    assert!(!stderr.contains(&token), "the token is never printed");
    assert_eq!(s.log_lines(1).await[0]["binding"], "agent_key");
}

/// `node tests/interop/dpop-proof.mjs ARGS` with panva's `dpop` package; `None` (the test is
/// skipped, saying so) where scripts/test.sh has not installed it, except in CI, which must run it.
fn node_dpop(args: &[&str]) -> Option<String> {
    let modules = std::env::var_os("PORTCULLIS_INTEROP_NODE_MODULES").filter(|m| std::path::Path::new(m).join("dpop").is_dir());
    let Some(modules) = modules else {
        assert!(std::env::var_os("CI").is_none(), "CI runs the DPoP interop test: scripts/test.sh installs node and the dpop package");
        println!("SKIPPED the node DPoP interop check: run scripts/test.sh, which installs node and the dpop package");
        return None;
    };
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/dpop-proof.mjs");
    let out = std::process::Command::new("node").arg(script).args(args).env("PORTCULLIS_INTEROP_NODE_MODULES", modules).output().expect("node runs");
    assert!(out.status.success(), "node {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).unwrap())
}

/// Proofs made by a maintained DPoP implementation we did not write (panva's `dpop` for
/// JavaScript, which names Ed25519 by its RFC 9864 name): one with the agent's own Web Bot
/// Auth key, which binds the token to the agent, and one ES256 proof with a key of its own.
#[tokio::test]
async fn proofs_made_by_the_dpop_package_for_javascript_are_accepted() {
    let s = Setup::start("").await;
    let agent_jwk = portcullis_client::private_jwk(&s.agent);
    let token = s.bound_token(&ed25519_thumbprint(&s.agent.verifying_key()));
    let request = json!({"jwk": agent_jwk, "alg": "Ed25519", "htu": HTU, "htm": "POST", "token": token}).to_string();
    let Some(proof) = node_dpop(&["proof", &request]) else { return };
    let header: Value = serde_json::from_slice(&base64_decode(proof.split('.').next().unwrap())).unwrap();
    assert_eq!(header["alg"], "Ed25519", "the package names the algorithm as RFC 9864 does: {header}");
    let resp = s.dpop(&token, &proof, true).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);

    let ec: Value = serde_json::from_str(&node_dpop(&["keygen", "ES256"]).unwrap()).unwrap();
    let public = json!({"kty": ec["kty"], "crv": ec["crv"], "x": ec["x"], "y": ec["y"]});
    let ec_token = s.bound_token(&portcullis_wire::signature::jwk_thumbprint(&public).unwrap());
    let request = json!({"jwk": ec, "alg": "ES256", "htu": HTU, "htm": "POST", "token": ec_token}).to_string();
    let resp = s.dpop(&ec_token, &node_dpop(&["proof", &request]).unwrap(), false).await;
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert_eq!(s.upstream.seen().len(), 2);
    let lines = s.log_lines(2).await;
    assert_eq!((lines[0]["binding"].as_str(), lines[1]["binding"].as_str()), (Some("agent_key"), Some("dpop")), "{lines:?}");
}
