//! Session binding (docs/design.md decision 9) through the real gateway: an `Mcp-Session-Id` the
//! backend issued is usable only by the (agent, token subject) that opened it. Everyone else,
//! and any id the gateway never bound, gets 404 `session_not_found` and the backend receives
//! nothing; with Redis the binding is shared by every instance and survives restarts; a store
//! that cannot answer fails closed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::path::Path;

use common::issuer::Issuer;
use common::pki::TestCa;
use common::redis::RedisServer;
use common::{client, Gateway, Upstream, INITIALIZE};
use ed25519_dalek::SigningKey;
use portcullis::config::Config;
use portcullis::signature::{ed25519_public_jwk, Signer};
use portcullis_wire::UnixTime;
use serde_json::{json, Value};

const AGENT_A: &str = "https://agent-a.example";
const AGENT_B: &str = "https://agent-b.example";
/// The authority agents sign and send as `Host` (the `listen.public_url` of the test config).
const AUTHORITY: &str = "mcp.example.com";
const AUD: &str = "https://mcp.example.com/mcp";
const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

/// One caller: an optional signing agent and an optional bearer token.
#[derive(Clone, Copy)]
struct Caller<'a> {
    agent: Option<&'a Signer>,
    token: Option<&'a str>,
}

/// The upstream, an issuer and two agents with static keys; gateways are started per test.
struct World {
    upstream: Upstream,
    issuer: Issuer,
    ca: TestCa,
    key_a: SigningKey,
    key_b: SigningKey,
    a: Signer,
    b: Signer,
}

impl World {
    async fn new() -> World {
        let ca = TestCa::new();
        let issuer = Issuer::start(&ca).await;
        let upstream = Upstream::start().await;
        let (key_a, key_b) = (SigningKey::from_bytes(&rand::random()), SigningKey::from_bytes(&rand::random()));
        let (a, b) = (Signer::new(key_a.clone(), AGENT_A).unwrap(), Signer::new(key_b.clone(), AGENT_B).unwrap());
        World { upstream, issuer, ca, key_a, key_b, a, b }
    }

    /// Signatures optional (static keys for both agents), tokens optional (verified when sent),
    /// the bundled policy, in `mode`, with `state` lines in `[state]` and decisions to `log`.
    fn config(&self, mode: &str, state: &str, log: Option<&Path>) -> Config {
        let jwk = |k: &SigningKey| ed25519_public_jwk(&k.verifying_key())["x"].as_str().unwrap().to_owned();
        let mut edit = common::TomlEdit::of(&common::config_toml(&self.upstream.url(), "")).set("mode", mode);
        if let Some(log) = log {
            edit = edit.set("log.decisions", log.display().to_string());
        }
        let mut text = edit.text();
        text += &format!(
            r#"
[signatures]
required = false
[[signatures.keys]]
agent = {AGENT_A:?}
jwk = {{ kty = "OKP", crv = "Ed25519", x = {:?} }}
[[signatures.keys]]
agent = {AGENT_B:?}
jwk = {{ kty = "OKP", crv = "Ed25519", x = {:?} }}
[oauth]
required = false
issuer = {:?}
issuer_ca = {:?}
[state]
command_timeout = "300ms"
connect_timeout = "300ms"
{state}
"#,
            jwk(&self.key_a),
            jwk(&self.key_b),
            self.issuer.url(),
            self.ca.ca_path(),
        );
        Config::parse(&text, "sessions test", Path::new(".")).unwrap()
    }

    /// An access token for user `sub`.
    fn token(&self, sub: &str) -> String {
        self.issuer.rsa.sign(&self.issuer.claims_with(AUD, json!({"sub": sub, "jti": uuid::Uuid::new_v4().to_string()})))
    }
}

/// Sends `method /mcp` to `gw` as `who`, with `session` as `Mcp-Session-Id`, signed now.
async fn send(gw: &Gateway, who: Caller<'_>, method: &str, session: Option<&str>, body: &str) -> reqwest::Response {
    let mut req = http::Request::builder().method(method).uri(format!("https://{AUTHORITY}/mcp")).header("content-type", "application/json");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let mut req = req.body(body.as_bytes().to_vec()).unwrap();
    if let Some(signer) = who.agent {
        signer.sign_request(&mut req, UnixTime::now()).unwrap();
    }
    let (parts, body) = req.into_parts();
    let mut out = client().request(parts.method, gw.url("/mcp")).headers(parts.headers).header("host", AUTHORITY).body(body);
    if let Some(t) = who.token {
        out = out.bearer_auth(t);
    }
    out.send().await.unwrap()
}

/// `initialize` as `who`; returns the session id the backend issued.
async fn initialize(gw: &Gateway, who: Caller<'_>) -> String {
    let resp = send(gw, who, "POST", None, INITIALIZE).await;
    assert_eq!(resp.status(), 200, "initialize");
    resp.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

/// 404 `session_not_found` in the refusal format, quoting neither the session id nor who
/// holds it; returns the body.
async fn assert_session_not_found(resp: reqwest::Response, session: &str) -> Value {
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    assert!(resp.headers().get("mcp-session-id").is_none());
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let text = resp.text().await.unwrap();
    assert!(!text.contains(session), "the refusal never quotes the session id: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"], "session_not_found");
    assert_eq!(body["request_id"], request_id.as_str());
    body
}

/// The one reason for every session the client may not use, whatever the cause.
const NOT_YOURS: &str = "Mcp-Session-Id names no session of this client (unknown, ended, expired, or opened by another identity); initialize a new session";

/// How many requests carrying `session` the backend received.
fn forwarded_with(upstream: &Upstream, session: &str) -> usize {
    upstream.seen().iter().filter(|s| s.headers.get("mcp-session-id").is_some_and(|v| v == session)).count()
}

#[tokio::test]
async fn another_agent_using_a_session_gets_404_and_the_backend_never_sees_it() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "", None)).await;
    let (a, b) = (Caller { agent: Some(&w.a), token: None }, Caller { agent: Some(&w.b), token: None });
    let session = initialize(&gw, a).await;
    assert_eq!(send(&gw, a, "POST", Some(&session), LIST).await.status(), 200, "the owner uses its session");
    assert_eq!(forwarded_with(&w.upstream, &session), 1);

    for method in ["POST", "GET", "DELETE"] {
        let body = if method == "POST" { LIST } else { "" };
        let refusal = assert_session_not_found(send(&gw, b, method, Some(&session), body).await, &session).await;
        assert_eq!(refusal["reason"], NOT_YOURS, "the same answer as for an unknown session");
    }
    let anonymous = Caller { agent: None, token: None };
    assert_session_not_found(send(&gw, anonymous, "POST", Some(&session), LIST).await, &session).await;
    assert_eq!(forwarded_with(&w.upstream, &session), 1, "no request of another identity reached the backend");

    assert_eq!(send(&gw, a, "GET", Some(&session), "").await.status(), 200, "the owner's stream still opens");
    let metrics = common::metrics(&gw).await;
    assert!(metrics.contains(r#"portcullis_requests_total{outcome="deny",status="404",error="session_not_found",server="default"} 4"#), "{metrics}");
    // Judged by the stage it is timed as (one stage list for findings and latencies).
    assert!(metrics.contains(r#"portcullis_findings_total{stage="session",error="session_not_found"} 4"#), "{metrics}");
    gw.shutdown().await;
}

#[tokio::test]
async fn the_same_agent_for_another_user_gets_404() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "", None)).await;
    let (alice_token, bob_token) = (w.token("alice"), w.token("bob"));
    let alice = Caller { agent: Some(&w.a), token: Some(&alice_token) };
    let session = initialize(&gw, alice).await;

    assert_session_not_found(send(&gw, Caller { agent: Some(&w.a), token: Some(&bob_token) }, "POST", Some(&session), LIST).await, &session).await;
    assert_session_not_found(send(&gw, Caller { agent: Some(&w.a), token: None }, "POST", Some(&session), LIST).await, &session).await;
    assert_session_not_found(send(&gw, Caller { agent: None, token: Some(&alice_token) }, "POST", Some(&session), LIST).await, &session).await;
    assert_eq!(forwarded_with(&w.upstream, &session), 0);

    let refreshed = w.token("alice");
    assert_eq!(
        send(&gw, Caller { agent: Some(&w.a), token: Some(&refreshed) }, "POST", Some(&session), LIST).await.status(),
        200,
        "a new token for the same user"
    );
    assert_eq!(forwarded_with(&w.upstream, &session), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_session_id_the_gateway_never_bound_is_404_even_after_a_restart() {
    let w = World::new().await;
    let a = Caller { agent: Some(&w.a), token: None };
    let gw = Gateway::start(w.config("enforce", "", None)).await;
    let refusal = assert_session_not_found(send(&gw, a, "POST", Some("session-made-up"), LIST).await, "session-made-up").await;
    assert_eq!(refusal["reason"], NOT_YOURS);
    let session = initialize(&gw, a).await;
    gw.shutdown().await;

    // The memory store forgets on restart: fail closed, the client re-initializes.
    let gw = Gateway::start(w.config("enforce", "", None)).await;
    assert_session_not_found(send(&gw, a, "POST", Some(&session), LIST).await, &session).await;
    assert_eq!(forwarded_with(&w.upstream, "session-made-up") + forwarded_with(&w.upstream, &session), 0);
    let again = initialize(&gw, a).await;
    assert_eq!(send(&gw, a, "POST", Some(&again), LIST).await.status(), 200);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_repeated_or_malformed_session_header_is_404() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "", None)).await;
    let session = common::initialize(&gw).await;
    let twice = client().post(gw.url("/mcp")).header("mcp-session-id", &session).header("mcp-session-id", &session).body(LIST).send().await.unwrap();
    let refusal = assert_session_not_found(twice, &session).await;
    assert!(refusal["reason"].as_str().unwrap().contains("one non-empty value of visible ASCII"), "{refusal}");
    let empty = client().post(gw.url("/mcp")).header("mcp-session-id", "").body(LIST).send().await.unwrap();
    assert_eq!(empty.status(), 404);
    assert_eq!(forwarded_with(&w.upstream, &session), 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn after_the_owners_delete_the_session_is_404() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "", None)).await;
    let a = Caller { agent: Some(&w.a), token: None };
    let session = initialize(&gw, a).await;
    assert_eq!(send(&gw, a, "DELETE", Some(&session), "").await.status(), 200);
    assert_eq!(w.upstream.seen().last().unwrap().method, "DELETE", "the backend ended the session");
    assert_session_not_found(send(&gw, a, "POST", Some(&session), LIST).await, &session).await;
    assert_session_not_found(send(&gw, a, "DELETE", Some(&session), "").await, &session).await;
    assert_eq!(forwarded_with(&w.upstream, &session), 1, "only the DELETE");
    gw.shutdown().await;
}

#[tokio::test]
async fn monitor_mode_forwards_another_identitys_use_and_logs_would_deny() {
    let w = World::new().await;
    let (_dir, log) = common::temp_path("decisions.jsonl");
    let gw = Gateway::start(w.config("monitor", "", Some(&log))).await;
    let (a, b) = (Caller { agent: Some(&w.a), token: None }, Caller { agent: Some(&w.b), token: None });
    let session = initialize(&gw, a).await;
    let resp = send(&gw, b, "POST", Some(&session), LIST).await;
    assert_eq!(resp.status(), 200, "monitor mode forwards");
    assert_eq!(forwarded_with(&w.upstream, &session), 1);
    gw.shutdown().await;
    let lines = common::decision_lines(&log);
    let line = lines.iter().find(|l| l["agent"] == AGENT_B).expect("agent B's line");
    assert_eq!(
        (line["outcome"].as_str(), line["error"].as_str(), line["status"].as_u64()),
        (Some("would_deny"), Some("session_not_found"), Some(200)),
        "{line}"
    );
    assert!(line["latency_us"]["session"].is_u64(), "{line}");
    assert!(!std::fs::read_to_string(&log).unwrap().contains(&session), "the decision log never holds a session id");
}

#[tokio::test]
async fn a_backend_handing_one_session_to_two_identities_is_502_and_the_id_is_withheld() {
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", "", None)).await;
    w.upstream.issue_fixed_session("shared-by-mistake");
    let (a, b) = (Caller { agent: Some(&w.a), token: None }, Caller { agent: Some(&w.b), token: None });
    assert_eq!(initialize(&gw, a).await, "shared-by-mistake");
    let resp = send(&gw, b, "POST", None, INITIALIZE).await;
    assert_eq!(resp.status(), 502);
    assert!(resp.headers().get("mcp-session-id").is_none(), "agent B never learns agent A's session id");
    let text = resp.text().await.unwrap();
    assert!(!text.contains("shared-by-mistake"), "{text}");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["error"], "session_conflict");
    assert_eq!(send(&gw, a, "POST", Some("shared-by-mistake"), LIST).await.status(), 200, "still agent A's");
    gw.shutdown().await;
}

#[tokio::test]
async fn two_gateways_on_one_redis_share_bindings_and_they_survive_a_restart() {
    let redis = RedisServer::start();
    let w = World::new().await;
    let state = format!("store = {:?}", redis.url());
    let one = Gateway::start(w.config("enforce", &state, None)).await;
    let two = Gateway::start(w.config("enforce", &state, None)).await;
    let (a, b) = (Caller { agent: Some(&w.a), token: None }, Caller { agent: Some(&w.b), token: None });
    let session = initialize(&one, a).await;
    assert_session_not_found(send(&two, b, "POST", Some(&session), LIST).await, &session).await;
    assert_eq!(send(&two, a, "POST", Some(&session), LIST).await.status(), 200, "the owner on the other instance");

    one.shutdown().await;
    let restarted = Gateway::start(w.config("enforce", &state, None)).await;
    assert_eq!(send(&restarted, a, "GET", Some(&session), "").await.status(), 200, "the binding outlives the instance");
    assert_eq!(send(&two, a, "DELETE", Some(&session), "").await.status(), 200);
    assert_session_not_found(send(&restarted, a, "POST", Some(&session), LIST).await, &session).await;
    assert_eq!(forwarded_with(&w.upstream, &session), 3, "the owner's POST, GET and DELETE");
    restarted.shutdown().await;
    two.shutdown().await;
}

#[tokio::test]
async fn redis_down_refuses_session_requests_and_withholds_new_sessions_with_503() {
    let mut redis = RedisServer::start();
    let w = World::new().await;
    let gw = Gateway::start(w.config("enforce", &format!("store = {:?}", redis.url()), None)).await;
    // Unsigned requests: the replay stage does not touch the store, so the session stage is
    // the one that meets the outage.
    let session = common::initialize(&gw).await;
    redis.stop();

    let resp = client().post(gw.url("/mcp")).header("mcp-session-id", &session).body(LIST).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.json::<Value>().await.unwrap()["error"], "state_unavailable");
    assert_eq!(forwarded_with(&w.upstream, &session), 0, "nothing forwarded while the store is down");

    let init = client().post(gw.url("/mcp")).body(INITIALIZE).send().await.unwrap();
    assert_eq!(init.status(), 503, "a session that cannot be bound is not handed out");
    assert!(init.headers().get("mcp-session-id").is_none());
    assert_eq!(init.json::<Value>().await.unwrap()["error"], "state_unavailable");
    gw.shutdown().await;
}
