//! The example MCP backend behind the real gateway: initialize, tools/list, tools/call,
//! notifications, and the identity the backend received.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::net::SocketAddr;

use common::backend::Backend;
use common::{client, config_without_policy, Gateway};
use serde_json::{json, Value};

async fn rpc(gw: &Gateway, body: Value) -> reqwest::Response {
    // Every request also tries to choose its own identity; the backend must never see it.
    client()
        .post(gw.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("x-portcullis-subject", "admin")
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn mcp_session_through_the_gateway() {
    let backend = Backend::start("127.0.0.1:0".parse::<SocketAddr>().unwrap()).await.unwrap();
    let gw = Gateway::start(config_without_policy(&format!("http://{}", backend.addr), "")).await;

    let init = rpc(&gw, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}})).await;
    assert_eq!(init.status(), 200);
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    assert_eq!(session.len(), 32, "a fresh random id: {session}");
    let v: Value = init.json().await.unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");

    let list: Value = rpc(&gw, json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await.json().await.unwrap();
    let names: Vec<&str> = list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["weather.get", "payments.send", "files.read"]);

    let call: Value = rpc(&gw, json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"payments.send","arguments":{"to":"bob","amount":25}}}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(call["result"]["content"][0]["text"], "Sent 25 USD to bob (transaction 1)");
    assert_eq!(call["result"]["_meta"]["received_identity"], json!({}), "a client cannot inject identity headers");

    let note = rpc(&gw, json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    assert_eq!(note.status(), 202);
    let unknown: Value = rpc(&gw, json!({"jsonrpc":"2.0","id":4,"method":"nope"})).await.json().await.unwrap();
    assert_eq!(unknown["error"]["code"], -32601);
    let get = client().get(gw.url("/mcp")).send().await.unwrap();
    assert_eq!(get.status(), 405);
    let in_session =
        client().post(gw.url("/mcp")).header("mcp-session-id", &session).json(&json!({"jsonrpc":"2.0","id":5,"method":"ping"})).send().await.unwrap();
    assert_eq!(in_session.status(), 200, "the session's own identity may use it");
    gw.shutdown().await;
    backend.stop();
}
