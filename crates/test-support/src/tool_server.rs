//! An MCP server whose tools a test changes while the gateway runs: for the tool catalog's
//! tests (pinning, drift, filtered lists, checked arguments).
//!
//! It speaks one protocol version at a time, as real servers do:
//! - 2025-11-25: `initialize` opens a session (`Mcp-Session-Id`), `notifications/initialized`
//!   is answered 202, any other request without the session is 400, `DELETE` ends it;
//!   `server/discover` is therefore a 400 too.
//! - 2026-07-28: stateless; `server/discover` names the version; every POST must carry
//!   `MCP-Protocol-Version` and a matching `Mcp-Method` (else 400 with -32020);
//!   `initialize` is an unknown method (404, -32601).
//!
//! `tools/list` is paginated (`page_size` tools per page, cursors `page-N`); answers are JSON
//! or an event stream that opens, as a 2025-11-25 server's does, with a priming event (an `id`
//! and an empty `data`), then a `notifications/message` event, a comment, and the response,
//! every event with an id. Like the reference server (server-everything), it keeps every event
//! it sent and replays those after the id a `GET` names in `Last-Event-ID` (resumption).
//! Answers can be padded or delayed, and `tools/list` can be made to fail or to be answered
//! with other bytes (`set_list_body`). `tools/call` is recorded and answered with a
//! text result naming the tool.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::{full, Body};

/// The protocol the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// MCP 2025-11-25: sessions.
    Sessions,
    /// MCP 2026-07-28: stateless, `server/discover`.
    Stateless,
}

/// Makes a body from a response's JSON text.
type MakeBody = dyn Fn(&str) -> Vec<u8> + Send + Sync;

/// Turns a `tools/list` response's JSON text into the whole body answered instead.
#[derive(Clone)]
struct ListData(Arc<MakeBody>);

impl std::fmt::Debug for ListData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListData")
    }
}

/// What the server does, changeable while it runs.
#[derive(Debug, Clone)]
struct Behaviour {
    tools: Vec<Value>,
    protocol: Protocol,
    is_sse: bool,
    page_size: usize,
    /// Bytes of whitespace added to each `tools/list` answer.
    pad: usize,
    /// Time before each `tools/list` answer.
    delay: Duration,
    /// `tools/list` answers 500.
    is_list_failing: bool,
    /// The body a `tools/list` is answered with instead (from the response's JSON text).
    list_data: Option<ListData>,
}

#[derive(Debug, Default)]
struct Record {
    /// Bodies of every `tools/call` received.
    calls: Vec<Value>,
    /// Headers of every `tools/call` received.
    call_headers: Vec<http::HeaderMap>,
    /// `tools/list` requests received.
    lists: usize,
    /// `DELETE`s received (sessions ended).
    deletes: usize,
    sessions: u64,
    /// Every event sent on a stream, with its id, in order (what a resumption replays).
    events: Vec<(String, Vec<u8>)>,
}

/// The server. Stops when dropped.
pub struct ToolServer {
    /// Where it listens.
    pub addr: SocketAddr,
    behaviour: Arc<Mutex<Behaviour>>,
    record: Arc<Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl ToolServer {
    /// Starts on a fresh 127.0.0.1 port with `tools`, speaking `protocol`, JSON answers, ten
    /// tools per page.
    pub async fn start(protocol: Protocol, tools: Vec<Value>) -> ToolServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let behaviour = Arc::new(Mutex::new(Behaviour {
            tools,
            protocol,
            is_sse: false,
            page_size: 10,
            pad: 0,
            delay: Duration::ZERO,
            is_list_failing: false,
            list_data: None,
        }));
        let record = Arc::new(Mutex::new(Record::default()));
        let (b, r) = (behaviour.clone(), record.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (b, r) = (b.clone(), r.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(req, b.clone(), r.clone()));
                    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        ToolServer { addr, behaviour, record, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.behaviour.lock().unwrap());
    }

    /// Replaces every tool.
    pub fn set_tools(&self, tools: Vec<Value>) {
        self.with(|b| b.tools = tools);
    }

    /// Changes one member of the tool called `name` (a JSON pointer below the tool, e.g.
    /// `/description` or `/annotations/destructiveHint`) to `value`.
    pub fn change_tool(&self, name: &str, pointer: &str, value: Value) {
        self.with(|b| {
            let tool = b.tools.iter_mut().find(|t| t["name"] == name).expect("no such tool");
            let (parent, member) = pointer.rsplit_once('/').expect("a JSON pointer");
            let target = if parent.is_empty() { tool } else { tool.pointer_mut(parent).expect("parent exists") };
            target[member] = value;
        });
    }

    /// Answers with event streams (`true`) or JSON.
    pub fn set_sse(&self, is_sse: bool) {
        self.with(|b| b.is_sse = is_sse);
    }

    /// Tools per `tools/list` page.
    pub fn set_page_size(&self, n: usize) {
        self.with(|b| b.page_size = n.max(1));
    }

    /// Pads each `tools/list` answer with `bytes` of whitespace.
    pub fn set_pad(&self, bytes: usize) {
        self.with(|b| b.pad = bytes);
    }

    /// Delays each `tools/list` answer.
    pub fn set_delay(&self, delay: Duration) {
        self.with(|b| b.delay = delay);
    }

    /// Makes `tools/list` answer 500 (`true`) or work again.
    pub fn set_list_failing(&self, is_failing: bool) {
        self.with(|b| b.is_list_failing = is_failing);
    }

    /// Answers every later `tools/list` with the body `body(json_text)` makes of the response's
    /// JSON text (with the usual content type): what a broken or hostile server might send.
    pub fn set_list_body(&self, body: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) {
        self.with(|b| b.list_data = Some(ListData(Arc::new(body))));
    }

    /// The ids of every event sent on a stream so far, in order (the first of each stream is
    /// its priming event).
    pub fn event_ids(&self) -> Vec<String> {
        self.record.lock().unwrap().events.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Bodies of every `tools/call` received.
    pub fn calls(&self) -> Vec<Value> {
        self.record.lock().unwrap().calls.clone()
    }

    /// Headers of every `tools/call` received.
    pub fn call_headers(&self) -> Vec<http::HeaderMap> {
        self.record.lock().unwrap().call_headers.clone()
    }

    /// `tools/list` requests received.
    pub fn lists(&self) -> usize {
        self.record.lock().unwrap().lists
    }

    /// Sessions ended with `DELETE`.
    pub fn deletes(&self) -> usize {
        self.record.lock().unwrap().deletes
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error_response(status: StatusCode, id: &Value, code: i64, message: &str) -> Response<Body> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    Response::builder().status(status).header("content-type", "application/json").body(full(body.to_string())).unwrap()
}

async fn handle(req: Request<Incoming>, behaviour: Arc<Mutex<Behaviour>>, record: Arc<Mutex<Record>>) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let b = behaviour.lock().unwrap().clone();
    if parts.method == Method::DELETE {
        record.lock().unwrap().deletes += 1;
        return Ok(Response::builder().status(StatusCode::OK).body(full("")).unwrap());
    }
    if parts.method == Method::GET {
        return Ok(resume(&parts.headers, &record));
    }
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return Ok(error_response(StatusCode::BAD_REQUEST, &Value::Null, -32700, "Parse error"));
    };
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let method = msg["method"].as_str().unwrap_or_default().to_owned();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut session = None;
    match b.protocol {
        Protocol::Stateless => {
            if header("mcp-protocol-version").as_deref() != Some("2026-07-28") || header("mcp-method").as_deref() != Some(method.as_str()) {
                return Ok(error_response(StatusCode::BAD_REQUEST, &id, -32020, "Header mismatch"));
            }
        }
        Protocol::Sessions if method == "initialize" => {
            let mut r = record.lock().unwrap();
            r.sessions += 1;
            session = Some(format!("tool-session-{}", r.sessions));
        }
        Protocol::Sessions => {
            if header("mcp-session-id").is_none() {
                return Ok(error_response(StatusCode::BAD_REQUEST, &id, -32600, "Bad Request: no valid session ID"));
            }
        }
    }
    let result = match (b.protocol, method.as_str()) {
        (Protocol::Sessions, "initialize") => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "tool-server", "version": "1"},
        }),
        (Protocol::Sessions, "notifications/initialized") => return Ok(Response::builder().status(StatusCode::ACCEPTED).body(full("")).unwrap()),
        (Protocol::Stateless, "server/discover") => json!({
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": true}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "tool-server", "version": "1"}},
        }),
        (_, "tools/list") => {
            record.lock().unwrap().lists += 1;
            if !b.delay.is_zero() {
                tokio::time::sleep(b.delay).await;
            }
            if b.is_list_failing {
                return Ok(error_response(StatusCode::INTERNAL_SERVER_ERROR, &id, -32603, "Internal error"));
            }
            let start: usize = msg["params"]["cursor"].as_str().and_then(|c| c.strip_prefix("page-")).and_then(|n| n.parse().ok()).unwrap_or(0);
            let page: Vec<Value> = b.tools.iter().skip(start).take(b.page_size).cloned().collect();
            let mut result = json!({"tools": page});
            if start + b.page_size < b.tools.len() {
                result["nextCursor"] = format!("page-{}", start + b.page_size).into();
            }
            if b.protocol == Protocol::Stateless {
                result["resultType"] = "complete".into();
                result["ttlMs"] = 60_000.into();
                result["cacheScope"] = "public".into();
            }
            result
        }
        (_, "tools/call") => {
            let mut r = record.lock().unwrap();
            r.calls.push(msg.clone());
            r.call_headers.push(parts.headers.clone());
            json!({"content": [{"type": "text", "text": format!("called {}", msg["params"]["name"].as_str().unwrap_or_default())}], "isError": false})
        }
        _ => return Ok(error_response(StatusCode::NOT_FOUND, &id, -32601, "Method not found")),
    };
    let response = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    let list_body = b.list_data.as_ref().filter(|_| method == "tools/list").map(|f| f.0(&response));
    let response = response.into_bytes();
    let pad = if method == "tools/list" { " ".repeat(b.pad) } else { String::new() };
    let (content_type, body) = if b.is_sse {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "listing"}}).to_string();
        let mut r = record.lock().unwrap();
        let stream = r.events.len();
        let mut event = |n: usize, raw: Vec<u8>| {
            let id = format!("{stream}-{n}");
            let mut ev = format!("id: {id}\n").into_bytes();
            ev.extend_from_slice(&raw);
            r.events.push((id, ev.clone()));
            ev
        };
        let mut body = event(0, b"data:\n\n".to_vec());
        body.extend(event(1, format!("event: message\ndata: {note}\n\n").into_bytes()));
        body.extend(format!(": keep-alive{pad}\n\n").into_bytes());
        let mut answer = b"event: message\ndata: ".to_vec();
        answer.extend_from_slice(&response);
        answer.extend_from_slice(b"\n\n");
        body.extend(event(2, answer));
        ("text/event-stream", list_body.unwrap_or(body))
    } else {
        let mut body = response;
        body.extend_from_slice(pad.as_bytes());
        ("application/json", list_body.unwrap_or(body))
    };
    let mut builder = Response::builder().status(StatusCode::OK).header("content-type", content_type);
    if let Some(s) = session {
        builder = builder.header("mcp-session-id", s);
    }
    Ok(builder.body(full(Bytes::from(body))).unwrap())
}

/// A `GET`: resumes a stream, replaying every event sent after the one `Last-Event-ID` names
/// (as the reference server's event store does, whichever stream it was on); without one, 405
/// (no standalone stream).
fn resume(headers: &http::HeaderMap, record: &Mutex<Record>) -> Response<Body> {
    let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()) else {
        return Response::builder().status(StatusCode::METHOD_NOT_ALLOWED).body(full("")).unwrap();
    };
    let r = record.lock().unwrap();
    let Some(at) = r.events.iter().position(|(id, _)| id == last) else {
        return Response::builder().status(StatusCode::NOT_FOUND).body(full("")).unwrap();
    };
    let body: Vec<u8> = r.events[at + 1..].iter().flat_map(|(_, ev)| ev.clone()).collect();
    Response::builder().status(StatusCode::OK).header("content-type", "text/event-stream").body(full(Bytes::from(body))).unwrap()
}
