//! Stage 10 through the real gateway: each quota kind to the 429 boundary (N allowed, N+1
#![allow(clippy::unwrap_used)]
//! refused with the right Retry-After), all-or-nothing spending, monitor mode.
use crate::common;

use common::policy::{config_logging, rego, tool_call, PolicyDir};
use common::{client, config, Gateway, Upstream};
use serde_json::{json, Value};

async fn call(gw: &Gateway, tool: &str, args: Value) -> reqwest::Response {
    client().post(gw.url("/mcp")).header("content-type", "application/json").body(tool_call(1, tool, args)).send().await.unwrap()
}

async fn assert_429(resp: reqwest::Response, retry_after: u64) {
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"].to_str().unwrap(), retry_after.to_string());
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "rate_limit_exceeded");
}

#[tokio::test]
async fn call_count_quota_allows_n_then_429_with_retry_after() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": true, "quotas": [{"key": "calls", "limit": 3, "per": "1h"}]}"#));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    for _ in 0..3 {
        assert_eq!(call(&gw, "search", json!({})).await.status(), 200);
    }
    // One unit refills every 3600 / 3 = 1200 s.
    assert_429(call(&gw, "search", json!({})).await, 1200).await;
    assert_eq!(upstream.seen().len(), 3, "the refused call never reached the upstream");
    gw.shutdown().await;
}

#[tokio::test]
async fn money_budget_spends_the_amount_and_refuses_what_does_not_fit() {
    let upstream = Upstream::start().await;
    let budget = r#"decision := {"allow": true, "quotas": [{"key": "usd:user-1", "cost": input.mcp.arguments.amount, "limit": 500, "per": "24h"}]}"#;
    let p = PolicyDir::new(&rego(budget));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    assert_eq!(call(&gw, "payments.send", json!({"amount": 400})).await.status(), 200);
    // 200 more does not fit: it would fit once 100 USD have refilled (86400 * 100 / 500 s).
    assert_429(call(&gw, "payments.send", json!({"amount": 200})).await, 17_280).await;
    // The refused 200 spent nothing: exactly the remaining 100 still fits.
    assert_eq!(call(&gw, "payments.send", json!({"amount": 100})).await.status(), 200);
    assert_429(call(&gw, "payments.send", json!({"amount": 1})).await, 173).await;
    assert_eq!(upstream.seen().len(), 2);
    gw.shutdown().await;
}

#[tokio::test]
async fn bundled_per_tool_rate_limit_is_120_per_minute() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    // One call refills every 60 / 120 = 0.5 s, so how many pass before the first 429 depends
    // on how fast this machine sends them: 120, plus what refilled meanwhile.
    let started = std::time::Instant::now();
    let mut allowed = 0;
    let refused = loop {
        let resp = call(&gw, "search", json!({})).await;
        if resp.status() != 200 || allowed > 1000 {
            break resp;
        }
        allowed += 1;
    };
    let refilled = (started.elapsed().as_secs_f64() / 0.5).ceil() as usize;
    assert!((120..=120 + refilled).contains(&allowed), "{allowed} calls passed in {:?}", started.elapsed());
    // Retry-After rounds the half second up to whole seconds.
    assert_429(refused, 1).await;
    // Another tool has its own bucket.
    assert_eq!(call(&gw, "docs.read", json!({})).await.status(), 200);
    assert_eq!(upstream.seen().len(), allowed + 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn request_refused_at_a_later_quota_does_not_spend_the_earlier_ones() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(
        r#"
a := {"key": "a", "limit": 2, "per": "1h"}
b := {"key": "b", "limit": 1, "per": "1h"}
decision := {"allow": true, "quotas": [a, b]} if input.mcp.tool == "both"
decision := {"allow": true, "quotas": [a]} if input.mcp.tool == "only_a"
"#,
    ));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    assert_eq!(call(&gw, "both", json!({})).await.status(), 200); // a: 1 left, b: 0 left
    assert_429(call(&gw, "both", json!({})).await, 3600).await; // refused at b; a refunded
    assert_eq!(call(&gw, "only_a", json!({})).await.status(), 200, "a still had one unit");
    assert_429(call(&gw, "only_a", json!({})).await, 1800).await;
    assert_eq!(upstream.seen().len(), 2);
    gw.shutdown().await;
}

#[tokio::test]
async fn monitor_mode_forwards_over_quota_and_logs_the_exhausted_bucket() {
    let upstream = Upstream::start().await;
    let p = PolicyDir::new(&rego(r#"decision := {"allow": true, "quotas": [{"key": "tiny", "limit": 1, "per": "1m"}]}"#));
    let (_dir, log) = common::temp_path("decisions.jsonl");
    let gw = Gateway::start(config_logging(&upstream.url(), &p.toml(), "monitor", &log)).await;
    assert_eq!(call(&gw, "search", json!({})).await.status(), 200);
    assert_eq!(call(&gw, "search", json!({})).await.status(), 200);
    assert_eq!(upstream.seen().len(), 2);
    gw.shutdown().await;
    let lines = common::decision_lines(&log);
    assert_eq!(lines[0]["outcome"], "allow");
    assert_eq!(lines[1]["outcome"], "would_deny");
    assert_eq!(lines[1]["error"], "rate_limit_exceeded");
    assert_eq!(lines[1]["quota"], "tiny");
}
