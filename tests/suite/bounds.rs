//! Global bounds on what clients can make the gateway hold or spend: request heads over all
//! connections, admin connections, answers a client stops reading, hashing and parsing large
//! bodies, the policy's time per request, and introspection calls for a bad token (in
//! `tokens.rs`). Each test reaches its bound as a client would, then checks the gateway refuses
//! or closes cleanly, counts it, and keeps serving. Deadlines here only detect hangs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use common::{client, config, config_without_policy, Gateway, Upstream};
use sha2::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a test waits before calling the gateway hung: far above every deadline used here.
const HANG: Duration = Duration::from_secs(20);

/// Reads until the gateway closes the connection; what was read (a reset ends it too).
async fn read_until_closed(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(wait, read_all).await.ok().map(|()| out)
}

/// The value of the first metric line starting with `series` (0 when absent).
async fn metric(gw: &Gateway, series: &str) -> u64 {
    let text = common::metrics(gw).await;
    text.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn wait_for_in_flight(gw: &Gateway, n: u64) {
    let started = Instant::now();
    while metric(gw, "portcullis_in_flight_requests ").await < n {
        assert!(started.elapsed() < HANG, "{n} requests reach the gateway");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// a. Request heads over all connections
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn request_heads_held_over_all_connections_are_bounded() {
    let upstream = Upstream::start().await;
    let limits = "[limits]\nmax_header_bytes = \"16KiB\"\nmax_header_bytes_in_flight = \"40KiB\"\nbody_timeout = \"2s\"\n";
    let gw = Gateway::start(config_without_policy(&upstream.url(), limits)).await;
    // Three connections send a 12 KiB head (each within max_header_bytes) and stall their
    // bodies: the gateway holds their heads, 36 KiB of the 40 KiB over all connections.
    let pad = "p".repeat(12 << 10);
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(format!("POST /mcp HTTP/1.1\r\nHost: x\r\nX-Pad: {pad}\r\nContent-Length: 10\r\n\r\n").as_bytes()).await.unwrap();
        stalled.push(s);
    }
    wait_for_in_flight(&gw, 3).await;

    // A fourth large head does not fit: refused at once, unread, never forwarded.
    let resp = client().post(gw.url("/mcp")).header("x-pad", &pad).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "overloaded");
    assert!(body["reason"].as_str().unwrap().contains("limits.max_header_bytes_in_flight"), "{body}");
    assert!(upstream.seen().is_empty());
    // A small head still fits beside them.
    assert_eq!(client().post(gw.url("/mcp")).body("{}").send().await.unwrap().status(), 200);
    assert_eq!(metric(&gw, "portcullis_bounds_reached_total{limit=\"max_header_bytes_in_flight\"}").await, 1);

    // The stalled uploads time out (408) and give their heads' share back.
    for s in &mut stalled {
        let answer = read_until_closed(s, HANG).await.expect("the stalled upload is answered");
        assert!(answer.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&answer));
    }
    let resp = client().post(gw.url("/mcp")).header("x-pad", &pad).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(upstream.seen().len(), 2);
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// b. Admin connections
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn admin_connections_are_capped_and_a_connection_past_the_cap_is_closed_at_once() {
    let upstream = Upstream::start().await;
    let limits = "[limits]\nmax_admin_connections = 2\nheader_timeout = \"10s\"\n";
    let gw = Gateway::start(config_without_policy(&upstream.url(), limits)).await;
    // Two silent sockets hold both admin connections (until header_timeout).
    let first = TcpStream::connect(gw.admin).await.unwrap();
    let second = TcpStream::connect(gw.admin).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A third probe is closed without an answer, at once rather than at a timeout.
    let mut third = TcpStream::connect(gw.admin).await.unwrap();
    let _ = third.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let answer = read_until_closed(&mut third, Duration::from_secs(5)).await.expect("a connection past the cap is closed at once");
    assert!(answer.is_empty(), "no answer past the cap: {}", String::from_utf8_lossy(&answer));
    // The client listener is not affected.
    assert_eq!(client().get(gw.url("/mcp")).send().await.unwrap().status(), 200);

    // Once a held connection closes, probes are answered again.
    drop(first);
    let started = Instant::now();
    loop {
        let fresh = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().unwrap();
        if let Ok(resp) = fresh.get(gw.admin_url("/healthz")).send().await {
            assert_eq!(resp.status(), 200);
            break;
        }
        assert!(started.elapsed() < HANG, "the admin listener answers again once a connection is free");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // (A probe above may have been refused too, while the first socket was still closing.)
    drop(second);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(metric(&gw, "portcullis_bounds_reached_total{limit=\"max_admin_connections\"}").await >= 1);
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// c. A client that stops reading its answer
// ---------------------------------------------------------------------------------------------

/// A backend whose every answer is `size` bytes of JSON, streamed in 64 KiB chunks; `released`
/// turns true when the gateway drops the answer before the backend has sent it all.
async fn large_answer_backend(size: usize) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let flag = released.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let flag = flag.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req: http::Request<hyper::body::Incoming>| {
                    let flag = flag.clone();
                    async move {
                        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<hyper::body::Frame<Bytes>, Infallible>>(2);
                        tokio::spawn(async move {
                            let chunk = Bytes::from(vec![b' '; 64 << 10]);
                            for _ in 0..size / chunk.len() {
                                if tx.send(Ok(hyper::body::Frame::data(chunk.clone()))).await.is_err() {
                                    flag.store(true, Ordering::SeqCst);
                                    return;
                                }
                            }
                        });
                        let body = http_body_util::StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
                        let resp = http::Response::builder().header("content-type", "application/json").header("content-length", size).body(body).unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new()).serve_connection(io, svc).await;
            });
        }
    });
    (addr, released)
}

#[tokio::test]
async fn a_client_that_stops_reading_its_answer_is_closed_after_the_write_timeout() {
    // Far more than the socket buffers on both sides of the gateway hold.
    const SIZE: usize = 32 << 20;
    let (backend, released) = large_answer_backend(SIZE).await;
    let gw = Gateway::start(config_without_policy(&format!("http://{backend}"), "[limits]\nwrite_timeout = \"1s\"\n")).await;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}").await.unwrap();
    let mut head = vec![0u8; 1024];
    let n = s.read(&mut head).await.unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head[..n]));
    // The client stops reading. The gateway closes the connection and lets go of the backend's
    // answer (the backend sees its stream dropped).
    let started = Instant::now();
    while !released.load(Ordering::SeqCst) {
        assert!(started.elapsed() < HANG, "the backend's answer is released once the client stopped reading for limits.write_timeout");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rest = read_until_closed(&mut s, HANG).await.expect("the connection is closed");
    assert!(n + rest.len() < SIZE, "the answer was cut off, not delivered: {} bytes", n + rest.len());
    assert_eq!(metric(&gw, "portcullis_bounds_reached_total{limit=\"write_timeout\"}").await, 1);
    // A client that reads gets the whole answer.
    let whole = client().post(gw.url("/mcp")).header("content-type", "application/json").body("{}").send().await.unwrap().bytes().await.unwrap();
    assert_eq!(whole.len(), SIZE);
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// d. Hashing and parsing large bodies
// ---------------------------------------------------------------------------------------------

fn content_digest(body: &str) -> String {
    format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(body.as_bytes())))
}

async fn offloaded(gw: &Gateway, work: &str) -> u64 {
    metric(gw, &format!("portcullis_offloaded_total{{work=\"{work}\"}}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_are_hashed_parsed_and_decided_off_the_async_workers() {
    let upstream = Upstream::start().await;
    let p = common::policy::PolicyDir::new(&common::policy::rego("decision := {\"allow\": true}"));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    let call = |size: usize| common::policy::tool_call(1, "search", serde_json::json!({"q": "q".repeat(size)}));
    // A small body is worked on in place: nothing is counted.
    let small = call(1 << 10);
    let resp = client().post(gw.url("/mcp")).header("content-digest", content_digest(&small)).body(small).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    for work in ["digest", "mcp", "policy"] {
        assert_eq!(offloaded(&gw, work).await, 0, "{work}");
    }
    // Large bodies at once, and a small request and the probes answered meanwhile.
    let large = call(512 << 10);
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (url, body, digest) = (gw.url("/mcp"), large.clone(), content_digest(&large));
        load.spawn(async move { client().post(url).header("content-digest", digest).body(body).send().await.unwrap().status() });
    }
    let small = call(16);
    let answered = tokio::time::timeout(HANG, client().post(gw.url("/mcp")).body(small).send()).await.expect("a small request is answered").unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(tokio::time::timeout(HANG, client().get(gw.admin_url("/healthz")).send()).await.expect("healthz answers").unwrap().status(), 200);
    while let Some(done) = tokio::time::timeout(HANG, load.join_next()).await.expect("the large bodies are decided") {
        assert_eq!(done.unwrap(), 200);
    }
    for work in ["digest", "mcp", "policy"] {
        assert_eq!(offloaded(&gw, work).await, 8, "each large body's {work} ran off the async workers");
    }
    assert_eq!(upstream.seen().len(), 10);
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// e. The policy's time per request
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_batch_whose_evaluations_outlast_the_policy_budget_is_refused_and_the_gateway_keeps_serving() {
    let upstream = Upstream::start().await;
    // Milliseconds per message on hostile arguments (every item compared with every other),
    // far below the 250 ms bound on one evaluation; a batch of 100 such takes far longer than
    // the request's budget.
    let p = common::policy::PolicyDir::new(&common::policy::rego(
        r#"dupes := count([1 | some a in input.mcp.arguments.items; some b in input.mcp.arguments.items; a == b])
decision := {"allow": dupes >= 0}"#,
    ));
    let gw = Gateway::start(config(&upstream.url(), &format!("{}\n[limits]\npolicy_budget = \"100ms\"\n", p.toml()))).await;
    let items: Vec<String> = (0..150).map(|i| format!("item-{i:04}")).collect();
    let batch: Vec<serde_json::Value> = (0..100)
        .map(|i| serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "search", "arguments": {"items": items}}}))
        .collect();
    let started = Instant::now();
    let resp = client().post(gw.url("/mcp")).header("content-type", "application/json").body(serde_json::Value::Array(batch).to_string()).send().await.unwrap();
    let took = started.elapsed();
    assert_eq!(resp.status(), 403);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "agent_access_denied");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.starts_with("policy_error") && reason.contains("limits.policy_budget"), "{reason}");
    assert!(took < HANG, "stopped, not run to the end");
    assert!(upstream.seen().is_empty());
    // One such message fits in the budget; the gateway keeps serving.
    let one = common::policy::tool_call(1, "search", serde_json::json!({"items": &items[..10]}));
    assert_eq!(client().post(gw.url("/mcp")).header("content-type", "application/json").body(one).send().await.unwrap().status(), 200);
    assert_eq!(upstream.seen().len(), 1);
    gw.shutdown().await;
}
