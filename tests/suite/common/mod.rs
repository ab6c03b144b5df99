//! Test harness: a real MCP-like upstream and the real gateway, both on 127.0.0.1:0.
#![allow(dead_code, clippy::unwrap_used)]

pub mod directory;
pub mod issuer;
pub mod keys;
pub mod pki;
pub mod policy;
pub mod redis;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use portcullis::config::Config;
use portcullis::server::{self, Running};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};

/// Initialise tracing so a failing test prints the gateway's logs.
pub fn trace_init() {
    portcullis::telemetry::init_test_tracing("portcullis=debug,warn");
}

/// What the upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A small MCP-like backend. Paths:
/// - `/sse`: `text/event-stream`; sends `event 1`, waits for [`Upstream::release`], sends `event 2`.
/// - `/slow`: answers after 5 s.
/// - `/delay?ms=N`: answers after N ms.
/// - anything else: JSON-RPC result echoing the request. Sessions as an MCP 2025-11-25 server
///   keeps them: an `initialize` without `Mcp-Session-Id` gets a fresh id (`session-<uuid>`), a
///   request that carries one gets it echoed back, any other request gets none.
pub struct Upstream {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Notify>,
    fixed_session: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let release = Arc::new(Notify::new());
        let fixed_session = Arc::new(Mutex::new(None));
        let (s, r, f) = (seen.clone(), release.clone(), fixed_session.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (s, r, f) = (s.clone(), r.clone(), f.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(req, s.clone(), r.clone(), f.clone()));
                    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Upstream { addr, seen, release, fixed_session, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// From now on every `initialize` gets the session id `id` (a faulty backend that hands
    /// one session to several clients).
    pub fn issue_fixed_session(&self, id: &str) {
        *self.fixed_session.lock().unwrap() = Some(id.to_owned());
    }

    /// Lets `/sse` send its second event.
    pub fn release(&self) {
        self.release.notify_one();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Body = BoxBody<Bytes, Infallible>;

async fn handle(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Notify>,
    fixed_session: Arc<Mutex<Option<String>>>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let path_and_query = parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: parts.method.clone(),
        path_and_query: path_and_query.clone(),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    match parts.uri.path() {
        "/sse" => {
            let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"id: 1\ndata: event 1\n\n")))).await;
                release.notified().await;
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"id: 2\ndata: event 2\n\n")))).await;
            });
            let stream = tokio_stream_from(rx);
            Ok(Response::builder()
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .header("x-accel-buffering", "no")
                .body(BodyExt::boxed(StreamBody::new(stream)))
                .unwrap())
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(Response::new(full("late")))
        }
        "/delay" => {
            let ms: u64 = parts.uri.query().and_then(|q| q.strip_prefix("ms=")).and_then(|v| v.parse().ok()).unwrap_or(500);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(Response::new(full("done after delay")))
        }
        _ => {
            let echo = serde_json::json!({
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"method": parts.method.as_str(), "path": path_and_query, "body_len": body.len()},
            });
            let is_initialize = serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|v| v["method"] == "initialize");
            let session = match parts.headers.get("mcp-session-id") {
                Some(presented) => Some(presented.clone()),
                None if is_initialize => {
                    let fixed = fixed_session.lock().unwrap().clone();
                    Some(http::HeaderValue::from_str(&fixed.unwrap_or_else(|| format!("session-{}", uuid::Uuid::new_v4().simple()))).unwrap())
                }
                None => None,
            };
            let mut builder = Response::builder();
            if let Some(s) = session {
                builder = builder.header("mcp-session-id", s);
            }
            Ok(builder
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .header("connection", "x-upstream-private")
                .header("x-upstream-private", "must not reach the client")
                .body(full(echo.to_string()))
                .unwrap())
        }
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

/// Adapts an mpsc receiver into a `Stream` without extra crates.
fn tokio_stream_from<T: Send + 'static>(mut rx: mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A gateway config in front of `upstream_url`, with the given extra TOML appended.
pub fn config_toml(upstream_url: &str, extra: &str) -> String {
    format!(
        r#"
mode = "enforce"
[listen]
addr = "127.0.0.1:0"
public_url = "https://mcp.example.com/mcp"
[upstream]
url = "{upstream_url}"
connect_timeout = "1s"
response_timeout = "1s"
{TEST_PATHS}
[admin]
addr = "127.0.0.1:0"
[log]
decisions = "off"
level = "debug"
{extra}
"#
    )
}

/// Parses a config (the signature and token stages off unless `extra` turns them on).
pub fn config(upstream_url: &str, extra: &str) -> Config {
    let mut text = config_toml(upstream_url, extra);
    if !extra.contains("[signatures]") {
        text.push_str("\n[signatures]\nrequired = false\n");
    }
    if !extra.contains("[oauth]") {
        text.push_str("\n[oauth]\nrequired = false\n");
    }

    Config::parse(&text, "test config", std::path::Path::new(".")).unwrap()
}

/// Like [`config`], with stages 8–10 (MCP parse, policy, quotas) off: for tests of the proxy
/// itself, whose bodies need not be JSON-RPC.
pub fn config_without_policy(upstream_url: &str, extra: &str) -> Config {
    config(upstream_url, &format!("{extra}\n[policy]\nenabled = false\n"))
}

/// A running gateway started through the library entry point.
pub struct Gateway {
    pub running: Option<Running>,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
}

impl Gateway {
    /// Starts `config` on a fresh 127.0.0.1 port. Tests address the gateway there, so that
    /// authority is listed as its own (`signatures.authority`) beside the configured ones.
    pub async fn start(mut config: Config) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        config.signatures.authority.push(listener.local_addr().unwrap().to_string());
        Gateway::start_on(config, listener).await
    }

    /// Starts `config` as written: its `signatures.authority` is exactly what it says.
    pub async fn start_exact(config: Config) -> Gateway {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Gateway::start_on(config, listener).await
    }

    async fn start_on(config: Config, listener: TcpListener) -> Gateway {
        trace_init();
        let running = server::start_on(config, listener).await.unwrap();
        let addr = running.addr;
        let admin = running.admin_addr.unwrap();
        Gateway { running: Some(running), addr, admin }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.admin)
    }

    pub async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// A plain HTTP client (no redirects, no proxies).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// A temp file path inside a fresh temp dir (kept alive by the returned guard).
pub fn temp_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    (dir, p)
}

/// Reads the decision log lines written to `path` as JSON values. Complete once the gateway
/// has shut down (shutdown writes every queued line); while it runs, use
/// [`wait_for_decision_lines`].
pub fn decision_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The decision log lines in `path` once there are at least `n`, while the gateway runs: a
/// line is queued before the response is sent and written by the log's writer thread moments
/// later. Fails the test if they do not appear within 10 s.
pub async fn wait_for_decision_lines(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines = decision_lines(path);
        if lines.len() >= n {
            return lines;
        }
        assert!(tokio::time::Instant::now() < deadline, "expected {n} decision-log lines in {} within 10 s, found {}: {lines:?}", path.display(), lines.len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends raw bytes on a fresh connection and returns what the server answered (until it closes
/// the connection or `wait` passes).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// An address nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// `extra_paths` for the test upstream's special paths (`/sse`, `/slow`, `/delay`).
pub const TEST_PATHS: &str = "extra_paths = [\"/sse\", \"/slow\", \"/delay\"]";

/// An MCP `initialize` request body.
pub const INITIALIZE: &str =
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"0"}}}"#;

/// Opens an MCP session through `gw` (unsigned, no token) and returns the id the upstream
/// issued.
pub async fn initialize(gw: &Gateway) -> String {
    let resp = client().post(gw.url("/mcp")).header("content-type", "application/json").body(INITIALIZE).send().await.unwrap();
    assert_eq!(resp.status(), 200, "initialize");
    resp.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}

/// The gateway's Prometheus text.
pub async fn metrics(gw: &Gateway) -> String {
    client().get(gw.admin_url("/metrics")).send().await.unwrap().text().await.unwrap()
}
