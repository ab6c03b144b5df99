//! The gateway in front of the MCP reference server, `@modelcontextprotocol/server-everything`
//! (pinned in scripts/test.sh, started with its Streamable HTTP transport on 127.0.0.1): a
//! 2025-11-25 server we did not write, which opens every event stream with a priming event and
//! replays a session's events after a `Last-Event-ID`. With a catalog and `filter_list`, the
//! catalog loads from it, `tools/list` is filtered, and resuming the list's stream from its
//! priming event replays no tool the caller may not see.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::answers::client_reads;
use crate::catalog::{catalog_ready, names, Scoped};
use crate::common::client;
use serde_json::{json, Value};

/// Only `echo` may be called without `tools:write`, so only it is listed to a `tools:read` caller.
const ECHO_ONLY: &str = "default decision := {\"allow\": true}\n\
    decision := {\"allow\": true, \"required_scopes\": [\"tools:write\"]} if {\n\
      input.mcp.method == \"tools/call\"\n\
      input.mcp.tool != \"echo\"\n\
    }\n";

/// The reference server, stopped (by its process id) when dropped.
struct Everything {
    child: Child,
    port: u16,
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Everything {
    /// Starts it on a free 127.0.0.1 port; `None` (the test is skipped, saying so) where
    /// scripts/test.sh has not installed it, except in CI, which must run it.
    async fn start() -> Option<Everything> {
        let package = std::env::var_os("PORTCULLIS_INTEROP_EVERYTHING").map(PathBuf::from).filter(|p| p.join("dist/index.js").is_file());
        let Some(package) = package else {
            assert!(std::env::var_os("CI").is_none(), "CI runs the reference-server test: scripts/test.sh installs node and server-everything");
            println!("SKIPPED the reference-server test: run scripts/test.sh, which installs node and @modelcontextprotocol/server-everything");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let preload = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/listen-local.cjs");
        let child = Command::new("node")
            .arg("--require")
            .arg(preload)
            .arg(package.join("dist/index.js"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs");
        let server = Everything { child, port };
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(20), "server-everything did not listen on {port}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(server)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Reads an event stream until an event holds a `tools` result or `wait` passes (a resumed
/// stream stays open); the data of every event read.
async fn read_until_list(resp: reqwest::Response, wait: Duration) -> (Vec<String>, String) {
    let mut resp = resp;
    let mut bytes = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, resp.chunk()).await {
        bytes.extend_from_slice(&chunk);
        if client_reads(&bytes).iter().any(|d| d.contains("\"tools\"")) {
            break;
        }
    }
    let data = client_reads(&bytes);
    (data, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn in_front_of_server_everything_the_catalog_loads_and_no_stream_shows_a_hidden_tool() {
    let Some(server) = Everything::start().await else { return };
    let s = Scoped::start_at(&server.url(), "enforce", "filter_list = true", ECHO_ONLY).await;
    catalog_ready(&s.gw).await;

    let post = |session: Option<&str>, body: Value| {
        let mut req = client()
            .post(s.gw.url("/mcp"))
            .bearer_auth(s.token("tools:read"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(id) = session {
            req = req.header("mcp-session-id", id);
        }
        req.body(body.to_string()).send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "suite", "version": "1"}}});
    let resp = post(None, init).await.unwrap();
    assert_eq!(resp.status(), 200);
    let session = resp.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let _ = resp.bytes().await;
    let resp = post(Some(&session), json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());

    let resp = post(Some(&session), json!({"jsonrpc": "2.0", "id": "list-1", "method": "tools/list"})).await.unwrap();
    assert_eq!(resp.status(), 200);
    let (data, text) = read_until_list(resp, Duration::from_secs(10)).await;
    assert_eq!(data.first().map(String::as_str), Some(""), "the server primes its stream, and the event is passed on: {text}");
    let priming = text.lines().find_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:"))).expect("the priming event's id").trim().to_owned();
    let answer: Value = serde_json::from_str(data.iter().find(|d| d.contains("\"tools\"")).expect("the list")).unwrap();
    assert_eq!(names(&answer["result"]), ["echo"], "{answer}");

    // The attack: resume from the list stream's priming event; the server replays the list.
    let resp = client()
        .get(s.gw.url("/mcp"))
        .bearer_auth(s.token("tools:read"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("last-event-id", &priming)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (data, text) = read_until_list(resp, Duration::from_secs(5)).await;
    let lists: Vec<Value> = data.iter().filter_map(|d| serde_json::from_str::<Value>(d).ok()).filter(|m| m["result"]["tools"].is_array()).collect();
    assert!(!lists.is_empty(), "the reference server replays the list: {text}");
    for list in &lists {
        assert_eq!(names(&list["result"]), ["echo"], "a replayed list is filtered");
    }
    assert!(!text.contains("get-sum"), "no hidden tool in the resumed stream: {text}");
    s.gw.shutdown().await;
}
