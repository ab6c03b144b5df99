//! Monitor mode decides and logs exactly like enforce mode but forwards: proven with a
//! Content-Digest that does not match the body (stage 2).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use common::{client, config_without_policy, decision_lines, temp_path, Gateway, Upstream};

const BAD_DIGEST: &str = "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"; // digest of the empty body

async fn send_tampered(gw: &Gateway) -> reqwest::Response {
    client().post(gw.url("/mcp")).header("content-digest", BAD_DIGEST).body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).send().await.unwrap()
}

#[tokio::test]
async fn digest_mismatch_is_401_in_enforce_mode_and_not_forwarded() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let mut cfg = config_without_policy(&upstream.url(), "");
    cfg.log.decisions = portcullis::config::DecisionSink::File(log.clone());
    let gw = Gateway::start(cfg).await;
    let resp = send_tampered(&gw).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["want-content-digest"], "sha-256=10, sha-512=5", "a mismatch says which digests are accepted");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "invalid_agent_credentials");
    assert_eq!(body["reason"], "Content-Digest sha-256 does not match the request body");
    assert!(upstream.seen().is_empty(), "the upstream got nothing");
    gw.shutdown().await;
    let lines = decision_lines(&log);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["outcome"], "deny");
    assert_eq!(lines[0]["status"], 401);
    assert_eq!(lines[0]["error"], "invalid_agent_credentials");
}

#[tokio::test]
async fn digest_mismatch_is_forwarded_and_logged_would_deny_in_monitor_mode() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let mut cfg = config_without_policy(&upstream.url(), "");
    cfg.mode = portcullis::config::Mode::Monitor.into();
    cfg.log.decisions = portcullis::config::DecisionSink::File(log.clone());
    let gw = Gateway::start(cfg).await;
    let resp = send_tampered(&gw).await;
    assert_eq!(resp.status(), 200, "monitor mode forwards");
    assert_eq!(upstream.seen().len(), 1, "the upstream got the request");
    let ok = client().post(gw.url("/mcp")).body("{}").send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let metrics = common::metrics(&gw).await;
    gw.shutdown().await;

    let lines = decision_lines(&log);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["mode"], "monitor");
    assert_eq!(lines[0]["outcome"], "would_deny");
    assert_eq!(lines[0]["status"], 200);
    assert_eq!(lines[0]["error"], "invalid_agent_credentials");
    assert_eq!(lines[0]["reason"], "Content-Digest sha-256 does not match the request body");
    assert_eq!(lines[1]["outcome"], "allow");
    assert!(lines[1]["error"].is_null());
    assert!(
        metrics.contains(r#"portcullis_requests_total{outcome="would_deny",status="200",error="invalid_agent_credentials",server="default"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"portcullis_findings_total{stage="digest",error="invalid_agent_credentials"} 1"#), "each finding is counted: {metrics}");
}

/// A monitored refusal forwarded to a backend that is down: the client gets 502
/// upstream_unavailable, and the decision log says that — the would-be refusal is the first
/// finding, and the report still counts it as what enforcement would refuse.
#[tokio::test]
async fn a_502_of_a_monitored_request_is_logged_as_the_upstreams_not_the_stages() {
    let (dir, log) = temp_path("decisions.log");
    let mut cfg = config_without_policy(&format!("http://{}", common::closed_port().await), "");
    cfg.mode = portcullis::config::Mode::Monitor.into();
    cfg.log.decisions = portcullis::config::DecisionSink::File(log.clone());
    let gw = Gateway::start(cfg).await;
    let resp = send_tampered(&gw).await;
    assert_eq!(resp.status(), 502);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "upstream_unavailable");
    gw.shutdown().await;

    let lines = decision_lines(&log);
    assert_eq!((lines[0]["outcome"].as_str(), lines[0]["status"].as_u64()), (Some("would_deny"), Some(502)), "{}", lines[0]);
    assert_eq!(lines[0]["error"], "upstream_unavailable", "the 502's cause is the backend: {}", lines[0]);
    assert!(lines[0]["reason"].as_str().unwrap().contains("unreachable"), "{}", lines[0]);
    assert_eq!(lines[0]["findings"][0]["error"], "invalid_agent_credentials", "the would-be refusal is kept: {}", lines[0]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis")).arg("report").arg(&log).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("invalid_agent_credentials: Content-Digest sha-256 does not match the request body"),
        "the report counts the would-be refusal: {text}"
    );
    drop(dir);
}
