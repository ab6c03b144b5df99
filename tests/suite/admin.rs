//! The admin listener: health, readiness, Prometheus metrics with outcomes and stage latency.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use common::{client, config_without_policy, Gateway, Upstream};

#[tokio::test]
async fn health_readiness_and_metrics_are_served() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nmax_body = \"16B\"\n")).await;
    let health = client().get(gw.admin_url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = client().get(gw.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<serde_json::Value>().await.unwrap()["ready"], true);

    assert_eq!(client().post(gw.url("/mcp")).body("{}").send().await.unwrap().status(), 200);
    assert_eq!(client().post(gw.url("/mcp")).body("x".repeat(17)).send().await.unwrap().status(), 413);

    let resp = client().get(gw.admin_url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.contains(r#"portcullis_requests_total{outcome="allow",status="200",error="",server="default"} 1"#), "{text}");
    assert!(text.contains(r#"portcullis_requests_total{outcome="deny",status="413",error="body_too_large",server="default"} 1"#), "{text}");
    assert!(text.contains(r#"portcullis_stage_duration_seconds_count{stage="body",server="default"} 2"#), "{text}");
    assert!(text.contains(r#"portcullis_stage_duration_seconds_count{stage="digest",server="default"} 1"#), "{text}");
    assert!(text.contains(r#"portcullis_stage_duration_seconds_count{stage="upstream",server="default"} 1"#), "{text}");
    assert!(text.contains("portcullis_request_duration_seconds_count 2"), "{text}");
    assert!(text.contains("# EOF"), "OpenMetrics text ends with # EOF");

    let missing = client().get(gw.admin_url("/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    // The admin paths are not served on the client-facing port, nor forwarded: only the MCP
    // endpoint is.
    let forwarded = upstream.seen().len();
    assert_eq!(client().get(gw.url("/metrics")).send().await.unwrap().status(), 404);
    assert_eq!(upstream.seen().len(), forwarded);
    gw.shutdown().await;
}

/// `upstream.health_check = true`: /readyz answers 503 naming the backend while it cannot be
/// reached, and shows each stage group's mode.
#[tokio::test]
async fn readyz_probes_the_upstream_when_asked_and_shows_the_modes() {
    let closed = common::closed_port().await;
    let cfg = |url: &str, check: bool| {
        let mut c = config_without_policy(url, "");
        c.upstream.health_check = check;
        c
    };
    let down = Gateway::start(cfg(&format!("http://{closed}"), true)).await;
    let ready = client().get(down.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["ready"], false, "{body}");
    let detail = body["checks"]["upstream"].as_str().unwrap().to_lowercase();
    assert!(detail.starts_with(&format!("unreachable: {}", closed.ip())) && detail.contains("refused"), "{body}");
    assert_eq!(body["mode"]["identity"], "enforce", "{body}");
    down.shutdown().await;

    let unchecked = Gateway::start(cfg(&format!("http://{closed}"), false)).await;
    let ready = client().get(unchecked.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "off by default: a down backend does not take the gateway out of rotation");
    assert_eq!(ready.json::<serde_json::Value>().await.unwrap()["checks"]["upstream"], "not_checked");
    unchecked.shutdown().await;

    let upstream = Upstream::start().await;
    let up = Gateway::start(cfg(&upstream.url(), true)).await;
    let ready = client().get(up.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<serde_json::Value>().await.unwrap()["checks"]["upstream"], "ok");
    up.shutdown().await;
}
