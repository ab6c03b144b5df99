//! Upstream credentials (`[upstream.auth]`): the backend gets a credential of its own, never the
//! user's token, and only with a request the identity and token stages vouched for. Proven with
//! the real gateway, a recording upstream and (token exchange) a real HTTPS issuer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::time::Duration;

use common::{client, config_without_policy, temp_path, wait_for_decision_lines, Gateway, Upstream};

const BAD_DIGEST: &str = "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"; // digest of the empty body

/// A gateway in front of `upstream` with `auth` as its `[upstream.auth]`, its decision log in
/// `log`.
async fn gateway(upstream: &Upstream, auth: &str, mode: portcullis::config::Mode, log: &std::path::Path) -> Gateway {
    let mut cfg = config_without_policy(&upstream.url(), &format!("[upstream.auth]\n{auth}\n"));
    cfg.mode = mode.into();
    cfg.log.decisions = portcullis::config::DecisionSink::File(log.to_owned());
    Gateway::start(cfg).await
}

async fn post(gw: &Gateway, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client().post(gw.url("/mcp")).body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn static_from_the_environment_replaces_the_clients_authorization() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let gw = gateway(&upstream, "kind = \"static\"\nvalue_env = \"CARGO_PKG_NAME\"", portcullis::config::Mode::Enforce, &log).await;
    let resp = post(&gw, &[("authorization", "Bearer the-users-token"), ("dpop", "proof")]).await;
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    let expected = format!("Bearer {}", std::env::var("CARGO_PKG_NAME").unwrap());
    assert_eq!(seen[0].headers.get_all("authorization").iter().collect::<Vec<_>>(), [expected.as_str()], "only the gateway's credential");
    assert!(seen[0].headers.get("dpop").is_none());
    let lines = wait_for_decision_lines(&log, 1).await;
    assert_eq!(lines[0]["upstream_auth"], "static");
    assert!(lines[0]["upstream_auth_cached"].is_null());
    assert!(lines[0]["latency_us"]["upstream_auth"].is_u64(), "{}", lines[0]);
    assert!(!std::fs::read_to_string(&log).unwrap().contains(&expected), "the secret is never logged");
    gw.shutdown().await;
}

#[tokio::test]
async fn static_from_a_file_sets_its_own_header_and_follows_the_file() {
    let upstream = Upstream::start().await;
    let (dir, log) = temp_path("decisions.log");
    let secret = dir.path().join("api-key");
    std::fs::write(&secret, "key-one\n").unwrap();
    let auth = format!("kind = \"static\"\nheader = \"X-Api-Key\"\nvalue_file = {secret:?}");
    let gw = gateway(&upstream, &auth, portcullis::config::Mode::Enforce, &log).await;
    let resp = post(&gw, &[("x-api-key", "client-chosen"), ("authorization", "Bearer the-users-token")]).await;
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen[0].headers.get_all("x-api-key").iter().collect::<Vec<_>>(), ["key-one"], "no prefix, newline dropped, the client's copy removed");
    assert!(seen[0].headers.get("authorization").is_none(), "the user's token never goes on");

    // Rotation: written to a temp file and renamed over the old one, as secret managers do.
    std::fs::write(dir.path().join("next"), "key-two-longer\r\n").unwrap();
    std::fs::rename(dir.path().join("next"), &secret).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        assert_eq!(post(&gw, &[]).await.status(), 200);
        let last = upstream.seen().pop().unwrap();
        if last.headers["x-api-key"] == "key-two-longer" {
            break;
        }
        assert_eq!(last.headers["x-api-key"], "key-one", "the old value until the new one is read");
        assert!(tokio::time::Instant::now() < deadline, "the rotated file was never read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A file replaced by an empty one keeps the last good value.
    std::fs::write(&secret, "").unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(post(&gw, &[]).await.status(), 200);
    assert_eq!(upstream.seen().pop().unwrap().headers["x-api-key"], "key-two-longer");
    gw.shutdown().await;
}

#[tokio::test]
async fn monitor_mode_forwards_a_request_with_identity_findings_without_the_credential() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let gw = gateway(&upstream, "kind = \"static\"\nvalue_env = \"CARGO_PKG_NAME\"", portcullis::config::Mode::Monitor, &log).await;
    // A Content-Digest that does not match: an identity-group finding.
    let resp = post(&gw, &[("content-digest", BAD_DIGEST)]).await;
    assert_eq!(resp.status(), 200, "monitor mode forwards");
    let resp = post(&gw, &[]).await;
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].headers.get("authorization").is_none(), "never a secret on a request the gateway could not vouch for");
    assert!(seen[1].headers.get("authorization").is_some(), "a clean request gets it");
    let lines = wait_for_decision_lines(&log, 2).await;
    assert_eq!((lines[0]["outcome"].as_str(), lines[0]["upstream_auth"].as_str()), (Some("would_deny"), Some("none")));
    assert_eq!((lines[1]["outcome"].as_str(), lines[1]["upstream_auth"].as_str()), (Some("allow"), Some("static")));
    gw.shutdown().await;
}

#[tokio::test]
async fn none_removes_the_token_and_says_so_without_timing_a_stage() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let gw = gateway(&upstream, "kind = \"none\"", portcullis::config::Mode::Enforce, &log).await;
    assert_eq!(post(&gw, &[("authorization", "Bearer the-users-token")]).await.status(), 200);
    assert!(upstream.seen()[0].headers.get("authorization").is_none());
    let lines = wait_for_decision_lines(&log, 1).await;
    assert_eq!(lines[0]["upstream_auth"], "none");
    assert!(lines[0]["latency_us"].get("upstream_auth").is_none(), "{}", lines[0]);
    gw.shutdown().await;
}
