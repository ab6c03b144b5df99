//! A small MCP-like upstream for the gateway's tests that records every request it receives
//! and has paths that stream, stall or answer late.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};

use crate::{full, Body};

/// `extra_paths` for the test upstream's special paths (`/sse`, `/slow`, `/delay`).
pub const TEST_PATHS: &str = "extra_paths = [\"/sse\", \"/slow\", \"/delay\"]";

/// What the upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request method.
    pub method: Method,
    /// The request target as received.
    pub path_and_query: String,
    /// The request headers as received.
    pub headers: HeaderMap,
    /// The whole request body.
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
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Notify>,
    fixed_session: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Starts on a fresh port on 127.0.0.1; panics if it cannot bind.
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

    /// `http://127.0.0.1:<port>`.
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

/// Adapts an mpsc receiver into a `Stream` without extra crates.
fn tokio_stream_from<T: Send + 'static>(mut rx: mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
