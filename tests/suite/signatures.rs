//! Agent identity end to end (pipeline stages 2–6): a real gateway, a real upstream and a
//! real HTTPS key directory (certificate from a CA made in the test), with requests signed by
//! the library's own `Signer` at the real clock.
#![allow(clippy::unwrap_used)]
use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::directory::{KeyDirectory, Misbehave};
use common::pki::TestCa;
use common::{Gateway, Upstream};
use ed25519_dalek::SigningKey;
use portcullis::config::Config;
use portcullis::signature::{ed25519_public_jwk, AgentKind, Signer};
use portcullis_wire::UnixTime;

fn new_key() -> SigningKey {
    SigningKey::from_bytes(&rand::random())
}

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;

/// Everything one test needs: upstream, CA, directory, gateway, and the decision log file.
struct World {
    upstream: Upstream,
    directory: KeyDirectory,
    gateway: Gateway,
    log: std::path::PathBuf,
    _ca: TestCa,
    _log_dir: tempfile::TempDir,
}

impl World {
    /// A gateway in `mode` trusting a directory that publishes `keys`; `extra` goes into
    /// `[signatures]`, `tail` after it (e.g. `[[signatures.keys]]`).
    async fn start(mode: &str, keys: &[&SigningKey], extra: &str, tail: &str) -> World {
        let upstream = Upstream::start().await;
        let ca = TestCa::new();
        let directory = KeyDirectory::start(&ca, &keys.iter().map(|k| k.verifying_key()).collect::<Vec<_>>()).await;
        let (log_dir, log) = common::temp_path("decisions.jsonl");
        let text = common::TomlEdit::of(&common::config_toml(&upstream.url(), "")).set("mode", mode).set("log.decisions", log.display().to_string()).text()
            + &format!(
                "\n[signatures]\nrequired = true\ntrusted_agents = [{origin:?}]\ndirectory_ca = {ca_path:?}\n{extra}\n{tail}\n[oauth]\nrequired = false\n",
                origin = directory.origin(),
                ca_path = ca.ca_path(),
            );
        let config = Config::parse(&text, "signatures test", Path::new(".")).unwrap();
        let gateway = Gateway::start(config).await;
        World { upstream, directory, gateway, log, _ca: ca, _log_dir: log_dir }
    }

    fn signer(&self, key: &SigningKey) -> Signer {
        Signer::new(key.clone(), self.directory.origin()).unwrap()
    }

    /// A signed POST /mcp, signed at `now` (the real clock unless a test moves it).
    fn signed(&self, signer: &Signer, body: &str, now: UnixTime) -> http::Request<Vec<u8>> {
        let mut req = http::Request::builder()
            .method("POST")
            .uri(self.gateway.url("/mcp"))
            .header("content-type", "application/json")
            .body(body.as_bytes().to_vec())
            .unwrap();
        signer.sign_request(&mut req, now).unwrap();
        req
    }

    async fn send(&self, req: http::Request<Vec<u8>>) -> reqwest::Response {
        let (parts, body) = req.into_parts();
        common::client().post(self.gateway.url("/mcp")).headers(parts.headers).body(body).send().await.unwrap()
    }

    /// The decision-log lines, once there are at least `n`.
    async fn decisions(&self, n: usize) -> Vec<serde_json::Value> {
        common::wait_for_decision_lines(&self.log, n).await
    }
}

fn now() -> UnixTime {
    UnixTime::now()
}

fn shifted(secs: i64) -> UnixTime {
    let n = UnixTime::now().0;
    UnixTime(if secs >= 0 { n + Duration::from_secs(secs as u64) } else { n - Duration::from_secs(secs.unsigned_abs()) })
}

/// Asserts a 401 `invalid_agent_credentials` refusal with `Accept-Signature` whose reason
/// contains `reason`, and returns the body.
async fn assert_agent_refused(resp: reqwest::Response, reason: &str) -> serde_json::Value {
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let accept = resp.headers().get("accept-signature").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_agent_credentials", "{body}");
    assert!(body["reason"].as_str().unwrap().contains(reason), "reason {:?} lacks {reason:?}", body["reason"]);
    assert!(accept.contains("tag=\"web-bot-auth\""), "Accept-Signature {accept:?}");
    body
}

#[tokio::test]
async fn valid_signature_is_forwarded_with_the_verified_agent_header() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let signer = w.signer(&key);
    let mut req = w.signed(&signer, BODY, now());
    // A client-chosen identity header is never passed on.
    req.headers_mut().insert("x-portcullis-agent", "https://forged.example".parse().unwrap());
    let resp = w.send(req).await;
    assert_eq!(resp.status(), 200);

    let seen = w.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["x-portcullis-agent"], w.directory.origin());
    assert_eq!(seen[0].headers.get_all("x-portcullis-agent").iter().count(), 1);
    assert_eq!(seen[0].body, BODY.as_bytes());
    let line = w.decisions(1).await.pop().unwrap();
    assert_eq!(line["outcome"], "allow");
    assert_eq!(line["agent"], w.directory.origin());
    assert_eq!(line["keyid"], signer.keyid());
    assert!(line["latency_us"]["signature"].is_u64() && line["latency_us"]["replay"].is_u64(), "{line}");
    let text = line.to_string();
    assert!(!text.contains("sig1=:"), "no signature value in the log: {text}");
}

#[tokio::test]
async fn tampered_body_is_refused_and_not_forwarded() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let req = w.signed(&w.signer(&key), BODY, now());
    let (parts, _) = req.into_parts();
    let resp = common::client().post(w.gateway.url("/mcp")).headers(parts.headers).body(BODY.replace("list", "call")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_agent_credentials");
    assert!(body["reason"].as_str().unwrap().contains("Content-Digest"), "{body}");
    assert!(w.upstream.seen().is_empty());
}

#[tokio::test]
async fn tampered_covered_header_fails_verification_and_is_not_forwarded() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let mut req = w.signed(&w.signer(&key), BODY, now());
    // A matching digest for a different body: the digest stage passes, the signature cannot.
    let other = BODY.replace("list", "call");
    let digest = format!("sha-256=:{}:", base64_sha256(other.as_bytes()));
    req.headers_mut().insert("content-digest", digest.parse().unwrap());
    *req.body_mut() = other.into_bytes();
    assert_agent_refused(w.send(req).await, "does not verify").await;
    assert!(w.upstream.seen().is_empty());
}

fn base64_sha256(b: &[u8]) -> String {
    use base64::Engine;
    use sha2::Digest;
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(b))
}

#[tokio::test]
async fn expired_and_future_dated_signatures_are_refused() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let signer = w.signer(&key);
    assert_agent_refused(w.send(w.signed(&signer, BODY, shifted(-600))).await, "expired").await;
    assert_agent_refused(w.send(w.signed(&signer, BODY, shifted(600))).await, "future").await;
    assert!(w.upstream.seen().is_empty());
}

#[tokio::test]
async fn unknown_key_is_refused_and_not_forwarded() {
    let (published, other) = (new_key(), new_key());
    let w = World::start("enforce", &[&published], "", "").await;
    let signer = w.signer(&other);
    assert_agent_refused(w.send(w.signed(&signer, BODY, now())).await, signer.keyid()).await;
    assert!(w.upstream.seen().is_empty());
    assert_eq!(w.directory.fetches(), 1);
}

#[tokio::test]
async fn untrusted_origin_is_refused_without_fetching_its_directory() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let stranger = KeyDirectory::start(&w._ca, &[key.verifying_key()]).await;
    let signer = Signer::new(key.clone(), stranger.origin()).unwrap();
    assert_agent_refused(w.send(w.signed(&signer, BODY, now())).await, "trusted_agents").await;
    assert_eq!(stranger.fetches(), 0);
    assert_eq!(w.directory.fetches(), 0);
    assert!(w.upstream.seen().is_empty());
}

#[tokio::test]
async fn key_removed_from_the_directory_is_refused_after_the_cache_expires() {
    let (old, new) = (new_key(), new_key());
    let w = World::start("enforce", &[&old, &new], "directory_min_ttl = \"1s\"\ndirectory_max_ttl = \"1s\"", "").await;
    let signer = w.signer(&old);
    assert_eq!(w.send(w.signed(&signer, BODY, now())).await.status(), 200);
    w.directory.set_keys(&[new.verifying_key()]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_agent_refused(w.send(w.signed(&signer, BODY, now())).await, "no key with keyid").await;
    assert_eq!(w.directory.fetches(), 2);
    assert_eq!(w.send(w.signed(&w.signer(&new), BODY, now())).await.status(), 200, "the remaining key still works");
    assert_eq!(w.upstream.seen().len(), 2);
}

#[tokio::test]
async fn directory_that_was_never_reached_refuses_and_forwards_nothing() {
    let key = new_key();
    let mut w = World::start("enforce", &[&key], "directory_timeout = \"2s\"", "").await;
    w.directory.stop();
    assert_agent_refused(w.send(w.signed(&w.signer(&key), BODY, now())).await, "unreachable").await;
    assert!(w.upstream.seen().is_empty());
    let line = w.decisions(1).await.pop().unwrap();
    assert_eq!(line["outcome"], "deny");
    assert!(line["agent"].is_null());
}

#[tokio::test]
async fn misbehaving_directories_are_refused_naming_the_fault() {
    let key = new_key();
    let big = format!("{{\"keys\": [], \"pad\": \"{}\"}}", "x".repeat(70 << 10));
    let many = serde_json::json!({ "keys": vec![ed25519_public_jwk(&key.verifying_key()); 65] }).to_string();
    let cases = [
        (Misbehave::Status(302), "answered 302"),
        (Misbehave::Status(500), "answered 500"),
        (Misbehave::MediaType("application/json"), "media type"),
        (Misbehave::Body(big), "larger than"),
        (Misbehave::Body(many), "more than 64 keys"),
        (Misbehave::Body("<html>".into()), "malformed"),
    ];
    for (how, reason) in cases {
        let w = World::start("enforce", &[&key], "", "").await;
        w.directory.misbehave(how);
        assert_agent_refused(w.send(w.signed(&w.signer(&key), BODY, now())).await, reason).await;
        assert!(w.upstream.seen().is_empty());
    }
}

#[tokio::test]
async fn directory_slower_than_the_timeout_is_unreachable() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "directory_timeout = \"300ms\"", "").await;
    w.directory.misbehave(Misbehave::Hang);
    let started = std::time::Instant::now();
    assert_agent_refused(w.send(w.signed(&w.signer(&key), BODY, now())).await, "unreachable").await;
    assert!(started.elapsed() < Duration::from_secs(5), "the fetch was cut at directory_timeout");
    assert!(w.upstream.seen().is_empty());
}

#[tokio::test]
async fn hundred_concurrent_cold_requests_fetch_the_directory_once() {
    let key = new_key();
    let w = Arc::new(World::start("enforce", &[&key], "", "").await);
    let signer = w.signer(&key);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let w = w.clone();
            let req = w.signed(&signer, BODY, now());
            tokio::spawn(async move { w.send(req).await.status().as_u16() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(w.directory.fetches(), 1);
    assert_eq!(w.upstream.seen().len(), 100);
    let metrics = common::client().get(w.gateway.admin_url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("portcullis_directory_fetches_total{result=\"ok\"} 1"), "{metrics}");
}

#[tokio::test]
async fn forged_keyid_storm_causes_no_fetch_storm() {
    let key = new_key();
    let w = Arc::new(World::start("enforce", &[&key], "", "").await);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let w = w.clone();
            let req = w.signed(&w.signer(&new_key()), BODY, now());
            tokio::spawn(async move { w.send(req).await.status().as_u16() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 401);
    }
    assert_eq!(w.directory.fetches(), 1, "one fetch per directory_refetch_interval however many keyids are forged");
    assert!(w.upstream.seen().is_empty());
}

#[tokio::test]
async fn replayed_signature_is_401_and_not_forwarded() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let req = w.signed(&w.signer(&key), BODY, now());
    let copy = clone_request(&req);
    assert_eq!(w.send(req).await.status(), 200);
    let resp = w.send(copy).await;
    assert_eq!(resp.status(), 401);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "replayed_signature");
    assert_eq!(w.upstream.seen().len(), 1);
    let metrics = common::client().get(w.gateway.admin_url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("portcullis_replay_hits_total 1"), "{metrics}");
}

#[tokio::test]
async fn relabelled_copy_of_a_signature_is_still_a_replay() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let req = w.signed(&w.signer(&key), BODY, now());
    let mut copy = clone_request(&req);
    for name in ["signature", "signature-input"] {
        let v = copy.headers()[name].to_str().unwrap().replacen("sig1=", "other=", 1);
        copy.headers_mut().insert(name, v.parse().unwrap());
    }
    assert_eq!(w.send(req).await.status(), 200);
    let resp = w.send(copy).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["error"], "replayed_signature");
    assert_eq!(w.upstream.seen().len(), 1);
}

#[tokio::test]
async fn hundred_simultaneous_copies_are_forwarded_exactly_once() {
    let key = new_key();
    let w = Arc::new(World::start("enforce", &[&key], "", "").await);
    let req = w.signed(&w.signer(&key), BODY, now());
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (w, copy) = (w.clone(), clone_request(&req));
            tokio::spawn(async move { w.send(copy).await.status().as_u16() })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 401).count(), 99);
    assert_eq!(w.upstream.seen().len(), 1);
}

fn clone_request(req: &http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    let mut copy = http::Request::builder().method(req.method().clone()).uri(req.uri().clone()).body(req.body().clone()).unwrap();
    *copy.headers_mut() = req.headers().clone();
    copy
}

#[tokio::test]
async fn monitor_mode_forwards_refused_signatures_and_logs_would_deny() {
    let (published, other) = (new_key(), new_key());
    let w = World::start("monitor", &[&published], "", "").await;
    let resp = w.send(w.signed(&w.signer(&other), BODY, now())).await;
    assert_eq!(resp.status(), 200);
    let unsigned = common::client().post(w.gateway.url("/mcp")).body("").send().await.unwrap();
    assert_eq!(unsigned.status(), 200);

    let seen = w.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.headers.get("x-portcullis-agent").is_none()), "no agent header without a verified signature");
    let lines = w.decisions(2).await;
    assert_eq!(lines.len(), 2);
    for line in &lines {
        assert_eq!(line["outcome"], "would_deny", "{line}");
        assert_eq!(line["error"], "invalid_agent_credentials");
    }
    assert!(lines[0]["reason"].as_str().unwrap().contains("no key with keyid"), "{}", lines[0]);
    assert!(lines[1]["reason"].as_str().unwrap().contains("not signed"), "{}", lines[1]);
}

#[tokio::test]
async fn monitor_mode_forwards_a_replay_without_the_agent_header() {
    let key = new_key();
    let w = World::start("monitor", &[&key], "", "").await;
    let req = w.signed(&w.signer(&key), BODY, now());
    let copy = clone_request(&req);
    assert_eq!(w.send(req).await.status(), 200);
    assert_eq!(w.send(copy).await.status(), 200);
    let seen = w.upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].headers["x-portcullis-agent"], w.directory.origin());
    assert!(seen[1].headers.get("x-portcullis-agent").is_none(), "a replayed copy carries no identity");
    let lines = w.decisions(2).await;
    assert_eq!((lines[0]["outcome"].as_str(), lines[1]["outcome"].as_str()), (Some("allow"), Some("would_deny")));
    assert_eq!(lines[1]["error"], "replayed_signature");
}

#[tokio::test]
async fn unsigned_request_is_refused_when_required_with_accept_signature() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let resp = common::client().get(w.gateway.url("/mcp")).send().await.unwrap();
    assert_agent_refused(resp, "not signed").await;
    // With a body too: the refusal says "not signed" (the real problem), not "no digest".
    let resp = common::client().post(w.gateway.url("/mcp")).body(BODY).send().await.unwrap();
    assert_agent_refused(resp, "not signed").await;
    assert!(w.upstream.seen().is_empty());
}

#[tokio::test]
async fn signed_request_without_content_digest_is_asked_for_one() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "", "").await;
    let mut req = w.signed(&w.signer(&key), BODY, now());
    req.headers_mut().remove("content-digest");
    let resp = w.send(req).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["want-content-digest"], "sha-256=10, sha-512=5");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_agent_credentials");
    assert!(body["reason"].as_str().unwrap().contains("Content-Digest is required"), "{body}");
    assert!(w.upstream.seen().is_empty());
}

#[tokio::test]
async fn unsigned_request_passes_without_agent_when_signatures_are_optional() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(common::config(&upstream.url(), "")).await;
    let mut req = common::client().get(gw.url("/mcp"));
    req = req.header("x-portcullis-agent", "https://forged.example");
    assert_eq!(req.send().await.unwrap().status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.get("x-portcullis-agent").is_none());
}

#[tokio::test]
async fn static_key_works_with_no_directory() {
    let key = new_key();
    let jwk = ed25519_public_jwk(&key.verifying_key());
    let tail = format!(
        "[[signatures.keys]]\nagent = \"https://static.example\"\njwk = {{ kty = \"OKP\", crv = \"Ed25519\", x = {:?} }}\n",
        jwk["x"].as_str().unwrap()
    );
    let w = World::start("enforce", &[], "", &tail).await;
    let signer = Signer::new(key, "https://static.example").unwrap();
    assert_eq!(w.send(w.signed(&signer, BODY, now())).await.status(), 200);
    let seen = w.upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["x-portcullis-agent"], "https://static.example");
    assert_eq!(w.directory.fetches(), 0);
}

#[tokio::test]
async fn directory_key_outside_its_validity_window_is_refused() {
    let key = new_key();
    let w = World::start("enforce", &[], "", "").await;
    let mut jwk = ed25519_public_jwk(&key.verifying_key());
    jwk["exp"] = serde_json::json!(now().secs() - 10);
    w.directory.set_jwks(vec![jwk]);
    assert_agent_refused(w.send(w.signed(&w.signer(&key), BODY, now())).await, "expired at").await;
    assert!(w.upstream.seen().is_empty());
}

/// The key set an attacker uploaded to a trusted origin's upload area, as plain JSON.
fn upload_keys(key: &SigningKey) -> String {
    serde_json::json!({ "keys": [ed25519_public_jwk(&key.verifying_key())] }).to_string()
}

/// Finding 1: a `type=jwks_uri` member naming any JSON file of a trusted origin made the
/// gateway attribute its keys to the origin itself. Refused by default, and the file is never
/// fetched.
#[tokio::test]
async fn jwks_uri_key_set_in_an_upload_area_is_refused_by_default_and_never_fetched() {
    let (agent_key, attacker) = (new_key(), new_key());
    let w = World::start("enforce", &[&agent_key], "", "").await;
    w.directory.serve_file("/uploads/avatar.json", "application/json", &upload_keys(&attacker));
    let url = format!("{}/uploads/avatar.json", w.directory.origin());
    let signer = Signer::new(attacker, &url).unwrap().with_agent_type(AgentKind::JwksUri);
    let body = assert_agent_refused(w.send(w.signed(&signer, BODY, now())).await, "signatures.accept_jwks_uri").await;
    assert!(!body["reason"].as_str().unwrap().contains("avatar"), "the client's path is not quoted: {body}");
    assert!(w.upstream.seen().is_empty());
    assert_eq!(w.directory.requests(), 0, "nothing was fetched");
    let line = w.decisions(1).await.pop().unwrap();
    assert_eq!((line["outcome"].as_str(), line["agent"].as_str()), (Some("deny"), None), "{line}");
}

/// With `accept_jwks_uri = true` a key set speaks for its full URL: that is the agent id the
/// policy sees, the decision log records and the upstream receives, never the bare origin.
#[tokio::test]
async fn accepted_jwks_uri_key_set_is_identified_by_its_full_url() {
    let (agent_key, other) = (new_key(), new_key());
    let policy = common::policy::PolicyDir::new(
        "package portcullis\nimport rego.v1\ndecision := {\"allow\": false, \"reason\": concat(\" \", [\"agent\", input.agent.id])}\n",
    );
    let w = World::start("enforce", &[&agent_key], "accept_jwks_uri = true", &policy.toml()).await;
    w.directory.serve_file("/uploads/keys.json", "application/json", &upload_keys(&other));
    let url = format!("{}/uploads/keys.json", w.directory.origin());
    let signer = Signer::new(other, &format!("{url}?v=1")).unwrap().with_agent_type(AgentKind::JwksUri);
    let resp = w.send(w.signed(&signer, BODY, now())).await;
    assert_eq!(resp.status(), 403);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["reason"], format!("agent {url}"), "policy input.agent.id is the key set's URL, query dropped");
    let line = w.decisions(1).await.pop().unwrap();
    assert_eq!(line["agent"], url.as_str());
    assert_eq!(w.directory.fetches(), 0, "the origin's directory was not involved");

    // Forwarded, the identity header carries the same full URL.
    policy.write("package portcullis\nimport rego.v1\ndecision := {\"allow\": true}\n");
    let forwarded = common::policy::eventually(|| async { w.send(w.signed(&signer, BODY, now())).await.status() == 200 }).await;
    assert!(forwarded, "the reloaded policy allows");
    let seen = w.upstream.seen();
    assert_eq!(seen.last().unwrap().headers["x-portcullis-agent"], url.as_str());
}

/// Finding 2: garbage signatures naming many URLs under a trusted origin caused one outbound
/// fetch each. The per-origin budget bounds them, whatever the requests name.
#[tokio::test]
async fn forty_requests_naming_forty_key_set_urls_cause_at_most_the_budgeted_fetches() {
    let key = new_key();
    let w = Arc::new(World::start("enforce", &[&key], "accept_jwks_uri = true\ndirectory_fetch_budget = 5", "").await);
    let mut refused_by_budget = 0;
    for i in 0..40 {
        let url = format!("{}/files/{i}.json", w.directory.origin());
        // Any key: the signature is garbage for every URL (none of them exists).
        let signer = Signer::new(new_key(), &url).unwrap().with_agent_type(AgentKind::JwksUri);
        let resp = w.send(w.signed(&signer, BODY, now())).await;
        assert_eq!(resp.status(), 401);
        let body: serde_json::Value = resp.json().await.unwrap();
        let reason = body["reason"].as_str().unwrap();
        if reason.contains("fetch budget exhausted") {
            assert!(reason.contains("signatures.directory_fetch_budget"), "{reason}");
            assert!(!reason.contains("/files/"), "the reason names the budget, not the request: {reason}");
            refused_by_budget += 1;
        }
    }
    // The budget refills at 5 per minute; a slow run may earn one more.
    assert!(w.directory.requests() <= 6, "{} fetches for 40 URLs", w.directory.requests());
    assert!(refused_by_budget >= 34, "{refused_by_budget}");
    assert!(w.upstream.seen().is_empty());
    let metrics = common::metrics(&w.gateway).await;
    assert!(metrics.contains(&format!("portcullis_directory_fetch_budget_exhausted_total{{budget=\"origin\"}} {refused_by_budget}")), "{metrics}");
}

#[tokio::test]
async fn the_global_fetch_budget_bounds_fetches_across_origins() {
    let key = new_key();
    let w = World::start("enforce", &[&key], "directory_fetch_budget_global = 1", "").await;
    // A second trusted origin (another port) in a gateway whose global budget allows one fetch.
    let second = KeyDirectory::start(&w._ca, &[key.verifying_key()]).await;
    let config = Config::parse(
        &(common::config_toml(&w.upstream.url(), "")
            + &format!(
                "\n[signatures]\nrequired = true\ntrusted_agents = [{:?}, {:?}]\ndirectory_ca = {:?}\ndirectory_fetch_budget_global = 1\n[oauth]\nrequired = false\n",
                w.directory.origin(),
                second.origin(),
                w._ca.ca_path()
            )),
        "global budget test",
        Path::new("."),
    )
    .unwrap();
    let gw = Gateway::start(config).await;
    let send = |origin: &str| {
        let mut req = http::Request::builder().method("POST").uri(gw.url("/mcp")).body(BODY.as_bytes().to_vec()).unwrap();
        Signer::new(key.clone(), origin).unwrap().sign_request(&mut req, now()).unwrap();
        let (parts, body) = req.into_parts();
        common::client().post(gw.url("/mcp")).headers(parts.headers).body(body).send()
    };
    assert_eq!(send(w.directory.origin()).await.unwrap().status(), 200);
    assert_agent_refused(send(second.origin()).await.unwrap(), "signatures.directory_fetch_budget_global").await;
    assert_eq!((w.directory.fetches(), second.fetches()), (1, 0));
    let metrics = common::metrics(&gw).await;
    assert!(metrics.contains("portcullis_directory_fetch_budget_exhausted_total{budget=\"global\"} 1"), "{metrics}");
}

/// docs/design.md decision 7 (contract fix): `max-age=1` is honoured, so a key removed from the
/// directory stops verifying within about a second, with the default settings.
#[tokio::test]
async fn key_removed_from_a_max_age_1_directory_stops_verifying_within_two_seconds() {
    let (old, new) = (new_key(), new_key());
    let w = World::start("enforce", &[&old, &new], "", "").await;
    w.directory.set_max_age(Some(1));
    let signer = w.signer(&old);
    assert_eq!(w.send(w.signed(&signer, BODY, now())).await.status(), 200);
    w.directory.set_keys(&[new.verifying_key()]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Generous against a slow machine: the refusal must come well before the old 60 s floor.
    let mut refused = None;
    for _ in 0..20 {
        let resp = w.send(w.signed(&signer, BODY, now())).await;
        if resp.status() == 401 {
            refused = Some(resp);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_agent_refused(refused.expect("the removed key stopped verifying"), "no key with keyid").await;
    assert_eq!(w.send(w.signed(&w.signer(&new), BODY, now())).await.status(), 200, "the remaining key still works");
}
