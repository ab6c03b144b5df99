//! Regression tests for the outside attack run's findings on the request path: each attack is
//! sent as an attacker would (real gateway and upstream on 127.0.0.1, raw sockets where a
//! client library would not send it), and the test asserts what the backend received.
//!
//! - policy bypass through tool arguments (`$serde_json::private::Number`);
//! - the body not bound by a signature that covers `"content-digest";key=…`;
//! - an unsigned query; policy and forwarding reading an unsigned `Host`;
//! - cross-service replay (`@authority` of another service);
//! - underscore variants of identity headers; case, slash and dot variants of the path.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use common::policy::{config_logging, rego, tool_call, PolicyDir};
use common::{client, Gateway, Upstream};
use ed25519_dalek::{Signer as _, SigningKey};
use portcullis::config::Config;
use portcullis::signature::{ed25519_public_jwk, ed25519_thumbprint, Signer};
use portcullis_wire::signature::base::{signature_base, MessageView, RequestView};
use portcullis_wire::UnixTime;
use sha2::Digest as _;

const AGENT: &str = "https://static.example";

fn key() -> SigningKey {
    SigningKey::from_bytes(&rand::random())
}

/// `[signatures]` with `key` as a static key of [`AGENT`] (no directory), then `extra`.
fn signatures(key: &SigningKey, extra: &str) -> String {
    let jwk = ed25519_public_jwk(&key.verifying_key());
    format!(
        "[signatures]\nrequired = true\n{extra}\n[[signatures.keys]]\nagent = {AGENT:?}\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {:?} }}\n",
        jwk["x"].as_str().unwrap()
    )
}

fn config(upstream: &Upstream, extra: &str) -> Config {
    common::config(&upstream.url(), extra)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Signs `req` by hand over `covered` (an RFC 9421 inner list, e.g. `("@method" …)`), the way
/// a signer that is not ours could: `Content-Digest` is left as the caller set it.
fn sign_covering(key: &SigningKey, req: &mut http::Request<Vec<u8>>, covered: &str) {
    let now = UnixTime::now().secs();
    let input = format!(
        "sig1={covered};created={now};expires={};keyid=\"{}\";alg=\"ed25519\";tag=\"web-bot-auth\"",
        now + 60,
        ed25519_thumbprint(&key.verifying_key())
    );
    req.headers_mut().insert("signature-agent", format!("sig1=\"{AGENT}\"").parse().unwrap());
    let dict: sfv::Dictionary = sfv::Parser::new(&input).parse().unwrap();
    let Some(sfv::ListEntry::InnerList(inner)) = dict.get("sig1") else { panic!("no inner list") };
    let view = RequestView { method: req.method(), uri: req.uri(), headers: req.headers(), scheme: "http", authority: None };
    let base = signature_base(&MessageView::Request(view), inner).unwrap();
    let signature = key.sign(&base).to_bytes();
    req.headers_mut().insert("signature-input", input.parse().unwrap());
    req.headers_mut().insert("signature", format!("sig1=:{}:", b64(&signature)).parse().unwrap());
}

fn post(url: &str, body: &str) -> http::Request<Vec<u8>> {
    http::Request::builder().method("POST").uri(url).header("content-type", "application/json").body(body.as_bytes().to_vec()).unwrap()
}

async fn send(url: &str, req: http::Request<Vec<u8>>) -> reqwest::Response {
    let (parts, body) = req.into_parts();
    client().post(url).headers(parts.headers).body(body).send().await.unwrap()
}

async fn error_of(resp: reqwest::Response) -> (u16, serde_json::Value) {
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or_default())
}

const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

// --- 1. policy bypass through tool arguments ---

#[tokio::test]
async fn a_serde_marker_key_in_the_arguments_does_not_hide_them_from_policy() {
    let upstream = Upstream::start().await;
    let policy = PolicyDir::new(&rego(
        r#"default decision := {"allow": true}
decision := {"allow": false, "reason": "too_much"} if input.mcp.arguments.amount > 100
decision := {"allow": false, "reason": "arguments_unseen"} if not input.mcp.arguments"#,
    ));
    let gw = Gateway::start(config(&upstream, &policy.toml())).await;
    // regorus's own deserializer read this object as the big number 5, or as undefined.
    for marker in [serde_json::json!("5"), serde_json::json!("not a number"), serde_json::json!(5)] {
        let body = tool_call(1, "payments.send", serde_json::json!({"$serde_json::private::Number": marker, "amount": 500, "to": "mallory"}));
        let (status, err) = error_of(client().post(gw.url("/mcp")).header("content-type", "application/json").body(body).send().await.unwrap()).await;
        assert_eq!((status, err["error"].as_str(), err["reason"].as_str()), (403, Some("agent_access_denied"), Some("too_much")), "marker {marker}");
    }
    assert!(upstream.seen().is_empty(), "the backend ran none of the calls");
    // The same call without the marker is decided the same way, and a small one passes.
    let ok = tool_call(2, "payments.send", serde_json::json!({"$serde_json::private::Number": "5", "amount": 5}));
    assert_eq!(client().post(gw.url("/mcp")).header("content-type", "application/json").body(ok).send().await.unwrap().status(), 200);
    gw.shutdown().await;
}

/// `{"k": {"k": … 1}}`: `levels` nested objects (the outermost is level 1, as the policy
/// input counts).
fn nested(levels: usize) -> serde_json::Value {
    let mut deep = serde_json::json!(1);
    for _ in 0..levels {
        deep = serde_json::json!({ "k": deep });
    }
    deep
}

/// Decision 15: arguments deeper than the policy input holds are the client's error, said as
/// such (400 `invalid_request` naming the limit), not blamed on the policy (403
/// `policy_error`); never forwarded, never undefined to the policy.
#[tokio::test]
async fn arguments_nested_past_the_limit_are_the_clients_invalid_request_not_a_policy_error() {
    let upstream = Upstream::start().await;
    let policy = PolicyDir::new(&rego(r#"default decision := {"allow": true}"#));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("decisions.log");
    let gw = Gateway::start(config_logging(&upstream.url(), &policy.toml(), "enforce", &log)).await;
    // 65 levels: past the limit, well inside serde_json's own 128.
    let body = tool_call(7, "echo", nested(65));
    let (status, err) = error_of(client().post(gw.url("/mcp")).header("content-type", "application/json").body(body).send().await.unwrap()).await;
    assert_eq!(status, 400, "{err}");
    assert_eq!((err["id"].as_i64(), err["error"]["code"].as_i64()), (Some(7), Some(-32600)), "a JSON-RPC error object for the call: {err}");
    let data = &err["error"]["data"];
    assert_eq!(data["error"], "invalid_request", "{err}");
    assert_eq!(data["reason"], "arguments nested deeper than 64 levels (the policy input's limit)", "{err}");
    assert!(upstream.seen().is_empty(), "the backend got nothing");
    // At the limit the call is decided and forwarded.
    let at = tool_call(8, "echo", nested(64));
    assert_eq!(client().post(gw.url("/mcp")).header("content-type", "application/json").body(at).send().await.unwrap().status(), 200);
    assert_eq!(upstream.seen().len(), 1);
    let lines = common::wait_for_decision_lines(&log, 2).await;
    assert_eq!((lines[0]["outcome"].as_str(), lines[0]["status"].as_u64(), lines[0]["error"].as_str()), (Some("deny"), Some(400), Some("invalid_request")));
    assert_eq!(lines[0]["reason"], "arguments nested deeper than 64 levels (the policy input's limit)");
    assert_eq!(lines[1]["outcome"], "allow");
    gw.shutdown().await;
}

/// In monitor mode the deep call goes where every other malformed request goes: forwarded,
/// logged `would_deny` with the same client error.
#[tokio::test]
async fn arguments_nested_past_the_limit_are_a_would_deny_invalid_request_in_monitor_mode() {
    let upstream = Upstream::start().await;
    let policy = PolicyDir::new(&rego(r#"default decision := {"allow": true}"#));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("decisions.log");
    let gw = Gateway::start(config_logging(&upstream.url(), &policy.toml(), "monitor", &log)).await;
    let body = tool_call(1, "echo", nested(65));
    assert_eq!(client().post(gw.url("/mcp")).header("content-type", "application/json").body(body).send().await.unwrap().status(), 200);
    assert_eq!(upstream.seen().len(), 1, "monitor mode forwards");
    let line = &common::wait_for_decision_lines(&log, 1).await[0];
    assert_eq!((line["outcome"].as_str(), line["error"].as_str()), (Some("would_deny"), Some("invalid_request")), "{line}");
    assert_eq!(line["findings"][0]["stage"], "mcp", "{line}");
    assert_eq!(line["reason"], "arguments nested deeper than 64 levels (the policy input's limit)");
    gw.shutdown().await;
}

// --- 2. the body must be bound: content-digest covered as required ---

#[tokio::test]
async fn content_digest_covered_with_a_key_parameter_does_not_bind_the_body() {
    let upstream = Upstream::start().await;
    let k = key();
    let gw = Gateway::start(config(&upstream, &signatures(&k, ""))).await;
    let url = gw.url("/mcp");
    // The agent signs only the md5 member of Content-Digest...
    let mut req = post(&url, LIST);
    let md5ish = b64(&[7u8; 16]);
    let digest = |body: &str| b64(&sha2::Sha256::digest(body.as_bytes()));
    req.headers_mut().insert("content-digest", format!("md5=:{md5ish}:, sha-256=:{}:", digest(LIST)).parse().unwrap());
    sign_covering(&k, &mut req, r#"("@method" "@authority" "@path" "content-digest";key="md5" "signature-agent";key="sig1")"#);
    // ...so a party on the path swaps the body and the sha-256 member the digest stage checks.
    let evil = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"payments.send","arguments":{"amount":9999}}}"#;
    *req.body_mut() = evil.as_bytes().to_vec();
    req.headers_mut().insert("content-digest", format!("md5=:{md5ish}:, sha-256=:{}:", digest(evil)).parse().unwrap());
    let (status, err) = error_of(send(&url, req).await).await;
    assert_eq!((status, err["error"].as_str()), (401, Some("invalid_agent_credentials")));
    assert!(err["reason"].as_str().unwrap().contains("content-digest"), "{err}");
    // Other parameters on required components do not count either.
    for covered in [
        r#"("@method" "@authority" "@path" "content-digest";bs "signature-agent";key="sig1")"#,
        r#"("@method" "@authority" "@path" "content-digest";sf "signature-agent";key="sig1")"#,
        r#"("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1";sf)"#,
    ] {
        let mut req = post(&url, LIST);
        req.headers_mut().insert("content-digest", format!("sha-256=:{}:", digest(LIST)).parse().unwrap());
        sign_covering(&k, &mut req, covered);
        assert_eq!(send(&url, req).await.status(), 401, "{covered}");
    }
    assert!(upstream.seen().is_empty(), "nothing reached the backend");
    // Covered as required, the same hand-made signature verifies.
    let mut req = post(&url, LIST);
    req.headers_mut().insert("content-digest", format!("sha-256=:{}:", digest(LIST)).parse().unwrap());
    sign_covering(&k, &mut req, r#"("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1")"#);
    assert_eq!(send(&url, req).await.status(), 200);
    gw.shutdown().await;
}

// --- the query must be signed when there is one ---

#[tokio::test]
async fn a_query_must_be_covered_and_cannot_be_changed_in_transit() {
    let upstream = Upstream::start().await;
    let k = key();
    let gw = Gateway::start(config(&upstream, &signatures(&k, ""))).await;
    let digest = format!("sha-256=:{}:", b64(&sha2::Sha256::digest(LIST.as_bytes())));
    // Signed without @query, then the query is changed on the way: refused.
    let mut req = post(&gw.url("/mcp?tenant=a"), LIST);
    req.headers_mut().insert("content-digest", digest.parse().unwrap());
    sign_covering(&k, &mut req, r#"("@method" "@authority" "@path" "content-digest" "signature-agent";key="sig1")"#);
    let (status, err) = error_of(send(&gw.url("/mcp?tenant=b"), req).await).await;
    assert_eq!(status, 401);
    assert!(err["reason"].as_str().unwrap().contains("@query"), "{err}");
    // Our signer covers @query whenever there is one; a changed query then fails to verify.
    let signer = Signer::new(k.clone(), AGENT).unwrap();
    let mut req = post(&gw.url("/mcp?tenant=a"), LIST);
    signer.sign_request(&mut req, UnixTime::now()).unwrap();
    assert!(req.headers()["signature-input"].to_str().unwrap().contains("\"@query\""));
    assert_eq!(send(&gw.url("/mcp?tenant=b"), req).await.status(), 401);
    assert!(upstream.seen().is_empty());
    let mut req = post(&gw.url("/mcp?tenant=a"), LIST);
    signer.sign_request(&mut req, UnixTime::now()).unwrap();
    assert_eq!(send(&gw.url("/mcp?tenant=a"), req).await.status(), 200);
    assert_eq!(upstream.seen()[0].path_and_query, "/mcp?tenant=a");
    gw.shutdown().await;
}

// --- 3. one authority per request ---

#[tokio::test]
async fn a_host_that_disagrees_with_the_absolute_form_target_is_refused() {
    let upstream = Upstream::start().await;
    let policy = PolicyDir::new(&rego(
        r#"default decision := {"allow": false, "reason": "wrong_host"}
decision := {"allow": true} if input.request.host == "trusted.example""#,
    ));
    let gw = Gateway::start(config(&upstream, &policy.toml())).await;
    let body = LIST;
    // The target says one host, Host another: which one a policy or a backend reads differs.
    let attack = format!(
        "POST http://{addr}/mcp HTTP/1.1\r\nHost: trusted.example\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len(),
        addr = gw.addr
    );
    let answer = common::raw_exchange(gw.addr, attack.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("\"bad_request\"") && answer.contains("disagrees"), "{answer}");
    // Agreeing authorities: policy sees the one the request is addressed to, and so does the
    // backend's X-Forwarded-Host.
    let agree = format!(
        "POST http://trusted.example/mcp HTTP/1.1\r\nHost: TRUSTED.example:80\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = common::raw_exchange(gw.addr, agree.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "only the unambiguous request was forwarded");
    assert_eq!(seen[0].headers["x-forwarded-host"], "trusted.example");
    // Two Host fields: refused too.
    let twice = format!("POST /mcp HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    let answer = common::raw_exchange(gw.addr, twice.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(upstream.seen().len(), 1);
    gw.shutdown().await;
}

// --- 4. cross-service replay ---

#[tokio::test]
async fn a_signature_for_another_authority_is_refused_by_default() {
    let upstream = Upstream::start().await;
    let k = key();
    // public_url is https://mcp.example.com/mcp: that authority, and only it, is the gateway's.
    let gw = Gateway::start_exact(config(&upstream, &signatures(&k, ""))).await;
    let signer = Signer::new(k.clone(), AGENT).unwrap();
    // A signature made for another service (here: the address the request happens to use).
    let mut req = post(&gw.url("/mcp"), LIST);
    signer.sign_request(&mut req, UnixTime::now()).unwrap();
    let (status, err) = error_of(send(&gw.url("/mcp"), req).await).await;
    assert_eq!((status, err["error"].as_str()), (401, Some("invalid_agent_credentials")));
    assert!(err["reason"].as_str().unwrap().contains("not this gateway's"), "{err}");
    assert!(upstream.seen().is_empty());
    // Signed for mcp.example.com and sent there (a name that resolves to the gateway): 200.
    let mut req = post("http://mcp.example.com/mcp", LIST);
    signer.sign_request(&mut req, UnixTime::now()).unwrap();
    let (parts, body) = req.into_parts();
    let resp = client().post(gw.url("/mcp")).headers(parts.headers).header("host", "mcp.example.com").body(body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(upstream.seen()[0].headers["x-forwarded-host"], "mcp.example.com");
    gw.shutdown().await;
}

#[tokio::test]
async fn signatures_authority_may_list_several_names() {
    let upstream = Upstream::start().await;
    let k = key();
    let extra = "authority = [\"mcp.example.com\", \"Internal.Example:8443\"]";
    let gw = Gateway::start_exact(config(&upstream, &signatures(&k, extra))).await;
    let signer = Signer::new(k.clone(), AGENT).unwrap();
    for (name, status) in [("internal.example:8443", 200), ("mcp.example.com", 200), ("other.example", 401)] {
        let mut req = post(&format!("http://{name}/mcp"), LIST);
        signer.sign_request(&mut req, UnixTime::now()).unwrap();
        let (parts, body) = req.into_parts();
        let resp = client().post(gw.url("/mcp")).headers(parts.headers).header("host", name).body(body).send().await.unwrap();
        assert_eq!(resp.status(), status, "{name}");
    }
    gw.shutdown().await;
}

#[test]
fn a_bad_authority_is_a_config_error_naming_the_field() {
    let text = common::config_toml("http://127.0.0.1:1", "[signatures]\nauthority = [\"mcp.example.com\", \"user@evil.example\"]\n[oauth]\nrequired = false\n");
    let err = Config::parse(&text, "test", Path::new(".")).expect_err("userinfo is not an authority").to_string();
    assert!(err.contains("signatures.authority[1]"), "{err}");
}

// --- 7. underscore variants of identity headers ---

#[tokio::test]
async fn underscore_variants_of_identity_and_forwarding_headers_never_reach_the_backend() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(common::config_without_policy(&upstream.url(), "")).await;
    let resp = client()
        .post(gw.url("/mcp"))
        .header("content-type", "application/json")
        .header("x_portcullis_agent", "https://spoofed.example")
        .header("X_Portcullis_Subject", "admin")
        .header("x_forwarded_for", "203.0.113.9")
        .header("x_forwarded_host", "evil.example")
        .header("mcp_session_id", "someone-elses")
        .header("x-kept", "1")
        .body(LIST)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let seen = &upstream.seen()[0];
    let underscored: Vec<&str> = seen.headers.keys().map(|k| k.as_str()).filter(|k| k.contains('_')).collect();
    assert!(underscored.is_empty(), "underscore names forwarded: {underscored:?}");
    assert_eq!(seen.headers["x-kept"], "1");
    assert_eq!(seen.headers["x-forwarded-for"], "127.0.0.1");
    gw.shutdown().await;
}

// --- path variants ---

#[tokio::test]
async fn only_the_mcp_endpoint_and_listed_paths_are_forwarded_in_every_mode() {
    for mode in ["enforce", "monitor"] {
        let upstream = Upstream::start().await;
        let text = common::TomlEdit::of(&common::config_toml(
            &upstream.url(),
            "[signatures]\nrequired = false\n[oauth]\nrequired = false\n[policy]\nenabled = false\n",
        ))
        .set("mode", mode)
        .text();
        let gw = Gateway::start(Config::parse(&text, "test", Path::new(".")).unwrap()).await;
        for path in ["/MCP", "/mcp/", "/mcp/.", "/./mcp", "//mcp", "/%6Dcp", "/mcp%2F", "/mcp;x", "/", "/admin"] {
            let attack = format!("POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{LIST}", gw.addr, LIST.len());
            let answer = common::raw_exchange(gw.addr, attack.as_bytes(), Duration::from_secs(5)).await;
            assert!(answer.starts_with("HTTP/1.1 404"), "{mode} {path}: {answer}");
            assert!(answer.contains("\"not_found\""), "{answer}");
        }
        assert!(upstream.seen().is_empty(), "{mode}: no variant reached the backend");
        // The endpoint and a listed extra path are forwarded.
        assert_eq!(client().post(gw.url("/mcp")).body(LIST).send().await.unwrap().status(), 200);
        assert_eq!(client().get(gw.url("/delay?ms=1")).send().await.unwrap().status(), 200);
        assert_eq!(upstream.seen().len(), 2);
        gw.shutdown().await;
    }
}

#[test]
fn extra_paths_must_be_canonical() {
    let text = common::TomlEdit::of(&common::config_toml("http://127.0.0.1:1", "")).set("upstream.extra_paths", common::toml_edit::value("[\"/mcp/\"]")).text();
    let err = Config::parse(&text, "test", Path::new(".")).expect_err("a trailing slash is a variant").to_string();
    assert!(err.contains("upstream.extra_paths[0]"), "{err}");
}
