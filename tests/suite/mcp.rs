//! Stage 8 through the real gateway: JSON-RPC parsing, MCP headers, batches, GET/DELETE.
#![allow(clippy::unwrap_used)]
use crate::common;

use common::policy::{config_logging, tool_call};
use common::{client, config, Gateway, Upstream};
use serde_json::{json, Value};

async fn post(gw: &Gateway, body: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client().post(gw.url("/mcp")).header("content-type", "application/json").body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

async fn assert_json_rpc_error(resp: reqwest::Response, code: i64, error: &str, id: Value) {
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], id);
    assert_eq!(body["error"]["code"], code);
    assert_eq!(body["error"]["data"]["error"], error);
    assert_eq!(body["error"]["data"]["request_id"], request_id.as_str());
}

#[tokio::test]
async fn non_json_body_is_400_parse_error_and_not_forwarded() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    assert_json_rpc_error(post(&gw, "{not json", &[]).await, -32700, "parse_error", Value::Null).await;
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn json_that_is_not_json_rpc_is_400_invalid_request_and_not_forwarded() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    assert_json_rpc_error(post(&gw, r#"{"jsonrpc":"1.0","id":9,"method":"ping"}"#, &[]).await, -32600, "invalid_request", json!(9)).await;
    assert_json_rpc_error(post(&gw, "[]", &[]).await, -32600, "invalid_request", Value::Null).await;
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn header_disagreeing_with_body_is_400_32020_and_not_forwarded() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    // The header claims a harmless read tool; the body calls another one.
    let body = tool_call(5, "files.write", json!({}));
    let resp = post(&gw, &body, &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "search")]).await;
    assert_json_rpc_error(resp, -32020, "header_mismatch", json!(5)).await;
    // 2026-07-28 requires the headers.
    let resp = post(&gw, &tool_call(6, "search", json!({})), &[("mcp-protocol-version", "2026-07-28")]).await;
    assert_json_rpc_error(resp, -32020, "header_mismatch", json!(6)).await;
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn agreeing_stateless_headers_including_base64_are_forwarded_untouched() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    let body = tool_call(1, "search", json!({"q": "x"}));
    let headers = [("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "=?base64?c2VhcmNo?=")];
    let resp = post(&gw, &body, &headers).await;
    assert_eq!(resp.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, body.as_bytes());
    assert_eq!(seen[0].headers["mcp-name"], "=?base64?c2VhcmNo?=");
    gw.shutdown().await;
}

#[tokio::test]
async fn batch_is_refused_whole_when_one_element_is_refused() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    // Bundled policy: an unknown agent may call read tools (search), not write tools.
    let bad = format!("[{},{}]", tool_call(1, "search", json!({})), tool_call(2, "files.write", json!({})));
    let resp = post(&gw, &bad, &[]).await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["reason"].as_str()), (Some("agent_access_denied"), Some("tool_not_allowed")));
    assert!(upstream.seen().is_empty());
    let good = format!("[{},{}]", tool_call(1, "search", json!({})), tool_call(2, "docs.read", json!({})));
    assert_eq!(post(&gw, &good, &[]).await.status(), 200);
    assert_eq!(upstream.seen().len(), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn get_and_delete_skip_json_parsing_and_still_pass_policy() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    let session = common::initialize(&gw).await;
    let get = client().get(gw.url("/mcp")).header("mcp-session-id", &session).send().await.unwrap();
    assert_eq!(get.status(), 200);
    let del = client().delete(gw.url("/mcp")).header("mcp-session-id", &session).send().await.unwrap();
    assert_eq!(del.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.iter().map(|s| s.method.as_str()).collect::<Vec<_>>(), ["POST", "GET", "DELETE"]);
    assert_eq!(seen[2].headers["mcp-session-id"], session.as_str());
    gw.shutdown().await;
}

#[tokio::test]
async fn notifications_and_responses_are_evaluated_and_forwarded() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "")).await;
    assert_eq!(post(&gw, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, &[]).await.status(), 200);
    assert_eq!(post(&gw, r#"{"jsonrpc":"2.0","id":"srv-1","result":{}}"#, &[]).await.status(), 200);
    assert_eq!(upstream.seen().len(), 2);
    gw.shutdown().await;
}

#[tokio::test]
async fn decision_log_names_method_and_tool_but_never_arguments() {
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.jsonl");
    let gw = Gateway::start(config_logging(&upstream.url(), "", "enforce", &log)).await;
    let resp = post(&gw, &tool_call(3, "search", json!({"q": "secret-argument-value"})), &[]).await;
    assert_eq!(resp.status(), 200);
    gw.shutdown().await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("secret-argument-value"), "arguments leaked into the decision log: {text}");
    let lines = common::decision_lines(&log);
    assert_eq!(lines[0]["mcp_method"], "tools/call");
    assert_eq!(lines[0]["tool"], "search");
    assert_eq!(lines[0]["rule"], "allow:unknown");
    assert!(lines[0]["policy"].as_str().is_some_and(|v| v.len() == 12));
    assert!(lines[0]["latency_us"]["mcp"].is_u64() && lines[0]["latency_us"]["policy"].is_u64());
}
