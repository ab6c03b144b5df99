//! One JSON line per request with the fields of docs/design.md, and never a token, a signature, a
//! body or tool arguments.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use common::{client, config_without_policy, decision_lines, temp_path, Gateway, Upstream};

#[tokio::test]
async fn log_lines_have_the_contract_fields_and_no_secrets() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let mut cfg = config_without_policy(&upstream.url(), "");
    cfg.log.decisions = portcullis::config::DecisionSink::File(log.clone());
    let gw = Gateway::start(cfg).await;

    let token = "eyJhbGciOiJSUzI1NiJ9.SECRET-TOKEN-PAYLOAD.SIGNATURE-PART";
    let signature = "sig1=:U0VDUkVULVNJR05BVFVSRS1CWVRFUw==:";
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"payments.send","arguments":{"card":"4111-SECRET-CARD"}}}"#;
    let resp = client().post(gw.url("/mcp?api_key=SECRET-QUERY")).header("authorization", format!("Bearer {token}")).body(body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    // A signature that does not verify: refused, and its value is not logged either.
    let signed = client()
        .post(gw.url("/mcp"))
        .header("signature", signature)
        .header("signature-input", r#"sig1=("@method");created=1;keyid="k";tag="web-bot-auth""#)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 401);
    let tampered = client().post(gw.url("/mcp")).header("content-digest", "sha-256=:AAAA:").body(body).send().await.unwrap();
    assert_eq!(tampered.status(), 401);
    gw.shutdown().await;

    let text = std::fs::read_to_string(&log).unwrap();
    for secret in ["SECRET-TOKEN-PAYLOAD", "SIGNATURE-PART", "U0VDUkVULVNJR05BVFVSRS1CWVRFUw", "4111-SECRET-CARD", "SECRET-QUERY", "arguments"] {
        assert!(!text.contains(secret), "decision log leaks {secret}: {text}");
    }
    let lines = decision_lines(&log);
    assert_eq!(lines.len(), 3, "one line per request");
    let l = &lines[0];
    for field in ["time", "request_id", "mode", "outcome", "status", "error", "reason", "agent", "keyid", "sub", "mcp_method", "tool", "latency_us", "total_us"]
    {
        assert!(l.get(field).is_some(), "missing {field} in {l}");
    }
    assert_eq!(l["request_id"], rid);
    assert_eq!(l["mode"], "enforce");
    assert_eq!(l["outcome"], "allow");
    assert_eq!(l["path"], "/mcp");
    assert!(l["latency_us"]["body"].is_u64() && l["latency_us"]["upstream"].is_u64(), "{l}");
    for l in &lines[1..] {
        assert_eq!(l["outcome"], "deny");
        assert_eq!(l["error"], "invalid_agent_credentials");
    }
}

#[tokio::test]
async fn lines_arrive_while_the_gateway_runs_and_dropped_lines_are_a_metric() {
    let upstream = Upstream::start().await;
    let (_dir, log) = temp_path("decisions.log");
    let mut cfg = config_without_policy(&upstream.url(), "");
    cfg.log.decisions = portcullis::config::DecisionSink::File(log.clone());
    let gw = Gateway::start(cfg).await;

    let sends = (0..20).map(|_| client().post(gw.url("/mcp")).body("{}").send());
    let mut ids: Vec<String> =
        futures_util::future::join_all(sends).await.into_iter().map(|r| r.unwrap().headers()["x-request-id"].to_str().unwrap().to_owned()).collect();
    // Written by the log's own thread, not the request's: the lines appear without a shutdown.
    let lines = common::wait_for_decision_lines(&log, 20).await;
    let mut logged: Vec<String> = lines.iter().map(|l| l["request_id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    logged.sort();
    assert_eq!(logged, ids, "one line per request");

    let metrics = common::metrics(&gw).await;
    assert!(metrics.contains("# TYPE portcullis_decision_log_dropped counter"), "{metrics}");
    assert!(metrics.contains("portcullis_decision_log_dropped_total 0"), "{metrics}");
    gw.shutdown().await;
    assert_eq!(decision_lines(&log).len(), 20, "nothing written twice");
}
