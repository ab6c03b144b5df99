//! A small MCP server (Streamable HTTP, JSON responses) to put behind the gateway in demos,
//! the compose file and load tests. Tools: `weather.get`, `payments.send`, `files.read`.
//!
//! It trusts the gateway: it echoes the verified identity headers (`x-portcullis-*`) it
//! received, and the claims of a JWT bearer token it got (`sub`, `aud`, `scope`, `act`: the
//! gateway's exchanged token), so a demo shows what reached the backend. It keeps no state but a payment counter.
//!
//! With a tools file ([`Backend::start_with_tools`], `portcullis example-backend --tools FILE`)
//! it lists the tools the file holds instead — a JSON array of MCP `Tool` objects, read again
//! at every `tools/list`, so a definition can be changed by hand to see the gateway's pins
//! notice it. A listed tool that is not one of the three above answers with what it was called
//! with.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::{full, Body as ResponseBody};

/// The protocol version the backend answers `initialize` with.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// Largest request body the backend reads.
const MAX_BODY: usize = 1 << 20;

#[derive(Default)]
struct State {
    payments: AtomicU64,
    tools_file: Option<std::path::PathBuf>,
}

/// A running backend.
#[derive(Debug)]
pub struct Backend {
    /// Where it listens.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Backend {
    /// Binds `addr` (port 0 picks one) and serves until [`Backend::stop`] or the runtime ends.
    pub async fn start(addr: SocketAddr) -> std::io::Result<Backend> {
        Self::start_with_tools(addr, None).await
    }

    /// [`Backend::start`], listing the tools of `tools_file` when one is given (see the module
    /// docs). The file is checked once here, so a wrong path is told at start.
    pub async fn start_with_tools(addr: SocketAddr, tools_file: Option<std::path::PathBuf>) -> std::io::Result<Backend> {
        if let Some(path) = &tools_file {
            read_tools(path).map_err(std::io::Error::other)?;
        }
        let listener = TcpListener::bind(addr).await.map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State { tools_file, ..State::default() });
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(req, &state).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Ok(Backend { addr, task })
    }

    /// Waits until the backend stops (it runs until the process ends).
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// Stops accepting connections.
    pub fn stop(&self) {
        self.task.abort();
    }
}

async fn handle(req: Request<Incoming>, state: &State) -> Response<ResponseBody> {
    match *req.method() {
        Method::POST => {}
        Method::DELETE => return status(StatusCode::NO_CONTENT),
        // No server-initiated stream in this example server (allowed: MCP Transports).
        _ => return status(StatusCode::METHOD_NOT_ALLOWED),
    }
    let identity: serde_json::Map<String, Value> = req
        .headers()
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-portcullis-") && k.as_str() != "x-portcullis-request-id")
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), Value::from(v.to_str().ok()?))))
        .collect();
    let token = received_token(req.headers());
    let body = match http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return rpc_error(Value::Null, -32700, "body unreadable or too large"),
    };
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return rpc_error(Value::Null, -32700, "Parse error");
    };
    let Some(id) = msg.get("id").cloned() else {
        // A notification or a response: accepted, nothing to answer (MCP Transports).
        return status(StatusCode::ACCEPTED);
    };
    let method = msg.get("method").and_then(Value::as_str).unwrap_or_default();
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    let result = match method {
        "initialize" => Ok(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "portcullis-example-backend", "version": env!("CARGO_PKG_VERSION")},
        })),
        "ping" => Ok(json!({})),
        "tools/list" => match &state.tools_file {
            None => Ok(json!({"tools": tools()})),
            Some(path) => read_tools(path).map(|tools| json!({"tools": tools})).map_err(|e| (-32603, e)),
        },
        "tools/call" => call_tool(&params, state, &identity, token),
        _ => Err((-32601, format!("Method not found: {method}"))),
    };
    let mut resp = match result {
        Ok(result) => json_rpc(json!({"jsonrpc": "2.0", "id": id, "result": result})),
        Err((code, message)) => rpc_error(id, code, &message),
    };
    if method == "initialize" {
        // A fresh id per session, as MCP requires ("globally unique and cryptographically
        // secure"); the gateway binds it to the identity that initialized.
        if let Ok(id) = HeaderValue::from_str(&uuid::Uuid::new_v4().simple().to_string()) {
            resp.headers_mut().insert("mcp-session-id", id);
        }
    }
    resp
}

fn tools() -> Value {
    json!([
        {"name": "weather.get", "description": "Current weather for a city",
         "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        {"name": "payments.send", "description": "Send a payment",
         "inputSchema": {"type": "object", "properties": {"to": {"type": "string"}, "amount": {"type": "number"}, "currency": {"type": "string"}}, "required": ["to", "amount"]}},
        {"name": "files.read", "description": "Read a file owned by a user",
         "inputSchema": {"type": "object", "properties": {"owner": {"type": "string"}, "path": {"type": "string"}}, "required": ["owner", "path"]}},
    ])
}

/// The tools of a tools file: a JSON array of objects, each with a string `name`.
fn read_tools(path: &std::path::Path) -> Result<Value, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read tools file {}: {e}", path.display()))?;
    let tools: Value = serde_json::from_slice(&text).map_err(|e| format!("tools file {} is not JSON: {e}", path.display()))?;
    let named = |t: &Value| t.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    match &tools {
        Value::Array(items) if items.iter().all(named) => Ok(tools),
        _ => Err(format!("tools file {} must be a JSON array of MCP Tool objects, each with a \"name\"", path.display())),
    }
}

/// What a demo reader wants to see of a JWT bearer token the backend got (the gateway's
/// exchanged token): `sub`, `aud`, `scope`, `act`. Not verified: a real backend verifies it
/// against its issuer first.
fn received_token(headers: &http::HeaderMap) -> Option<Value> {
    let token = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ")?;
    let payload = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, token.split('.').nth(1)?).ok()?;
    let claims: Value = serde_json::from_slice(&payload).ok()?;
    Some(["sub", "aud", "scope", "act"].iter().filter_map(|k| Some(((*k).to_owned(), claims.get(*k)?.clone()))).collect::<serde_json::Map<_, _>>().into())
}

fn call_tool(params: &Value, state: &State, identity: &serde_json::Map<String, Value>, token: Option<Value>) -> Result<Value, (i64, String)> {
    let name = params.get("name").and_then(Value::as_str).unwrap_or_default();
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    let arg = |k: &str| args.get(k).map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())).unwrap_or_default();
    let text = match name {
        "weather.get" => format!("Sunny in {}, 21°C", arg("city")),
        "payments.send" => {
            let n = state.payments.fetch_add(1, Ordering::Relaxed) + 1;
            format!("Sent {} {} to {} (transaction {n})", arg("amount"), args.get("currency").and_then(Value::as_str).unwrap_or("USD"), arg("to"))
        }
        "files.read" => format!("Contents of {} (owned by {})", arg("path"), arg("owner")),
        _ if state
            .tools_file
            .as_deref()
            .and_then(|p| read_tools(p).ok())
            .is_some_and(|t| t.as_array().is_some_and(|a| a.iter().any(|t| t["name"] == name))) =>
        {
            format!("called {name} with {args}")
        }
        _ => return Err((-32602, format!("Unknown tool: {name}"))),
    };
    let mut meta = json!({"received_identity": identity});
    if let Some(token) = token {
        meta["received_token"] = token;
    }
    Ok(json!({"content": [{"type": "text", "text": text}], "isError": false, "_meta": meta}))
}

fn json_rpc(v: Value) -> Response<ResponseBody> {
    let mut r = Response::new(full(v.to_string()));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn rpc_error(id: Value, code: i64, message: &str) -> Response<ResponseBody> {
    json_rpc(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

fn status(s: StatusCode) -> Response<ResponseBody> {
    let mut r = Response::new(full(""));
    *r.status_mut() = s;
    r
}
