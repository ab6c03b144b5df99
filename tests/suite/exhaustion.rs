//! Resource exhaustion by unauthenticated clients: connection slots held by sockets that never
//! finish a request, CPU held by large JSON-RPC batches, memory held by stalled uploads. In
//! each case the gateway keeps answering everyone else. Deadlines in these tests only detect
//! hangs; nothing here measures speed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{client, config, config_without_policy, Gateway, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// How long a test waits before calling the gateway hung: far above every deadline used here.
const HANG: Duration = Duration::from_secs(20);

/// Reads until the gateway closes the connection (or `wait` passes: `None`).
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match tokio::time::timeout(wait, stream.read_to_end(&mut out)).await {
        Ok(_) => Some(out),
        Err(_) => None,
    }
}

/// Opens a connection and misbehaves on it until the gateway closes it, then again, forever.
fn attacker(tasks: &mut JoinSet<()>, addr: SocketAddr, kind: Attack) {
    tasks.spawn(async move {
        loop {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            match kind {
                Attack::Silent => {}
                Attack::HalfPreface => {
                    let _ = s.write_all(&H2_PREFACE[..23]).await;
                }
                Attack::SlowHead => {
                    // A header byte every 300 ms: the head never completes.
                    let _ = s.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\n").await;
                    while s.write_all(b"X").await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        if peer_closed(&mut s).await {
                            break;
                        }
                    }
                }
                Attack::SlowPreface => {
                    // The HTTP/2 preface, a byte every 300 ms: protocol detection never ends.
                    for b in H2_PREFACE.iter().cycle() {
                        if s.write_all(&[*b]).await.is_err() || peer_closed(&mut s).await {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }
            }
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        }
    });
}

async fn peer_closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    matches!(tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

#[derive(Clone, Copy)]
enum Attack {
    Silent,
    HalfPreface,
    SlowHead,
    SlowPreface,
}

/// A fresh connection per request, so each one has to win a connection slot.
async fn answered_on_a_new_connection(url: &str) -> reqwest::StatusCode {
    let fresh = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().unwrap();
    let sent = fresh.post(url).body("{}").send();
    tokio::time::timeout(HANG, sent).await.expect("the gateway answers a valid client while attackers hold sockets").unwrap().status()
}

#[tokio::test]
async fn sockets_that_never_finish_a_request_do_not_lock_out_clients() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nmax_connections = 16\nheader_timeout = \"1s\"\n")).await;
    let mut attackers = JoinSet::new();
    for _ in 0..16 {
        attacker(&mut attackers, gw.addr, Attack::Silent);
    }
    for _ in 0..8 {
        attacker(&mut attackers, gw.addr, Attack::HalfPreface);
        attacker(&mut attackers, gw.addr, Attack::SlowHead);
    }
    for _ in 0..4 {
        attacker(&mut attackers, gw.addr, Attack::SlowPreface);
    }
    // Let the attackers take every slot first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        assert_eq!(answered_on_a_new_connection(&gw.url("/mcp")).await, 200);
    }
    attackers.abort_all();
    assert_eq!(upstream.seen().len(), 3, "only the valid requests were forwarded");
    gw.shutdown().await;
}

#[tokio::test]
async fn silent_half_preface_and_slow_sockets_are_closed_at_the_header_timeout() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nheader_timeout = \"1s\"\n")).await;
    let mut silent = TcpStream::connect(gw.addr).await.unwrap();
    let mut half = TcpStream::connect(gw.addr).await.unwrap();
    half.write_all(&H2_PREFACE[..23]).await.unwrap();
    // The whole preface, then nothing: an HTTP/2 connection that never opens a stream.
    let mut preface_only = TcpStream::connect(gw.addr).await.unwrap();
    preface_only.write_all(H2_PREFACE).await.unwrap();
    preface_only.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap(); // empty SETTINGS
    let wait = Duration::from_secs(1) + Duration::from_secs(5);
    assert_eq!(closed_within(&mut silent, wait).await, Some(Vec::new()), "a silent socket is closed without an answer");
    assert!(closed_within(&mut half, wait).await.is_some(), "23 bytes of the HTTP/2 preface do not hold a connection");
    assert!(closed_within(&mut preface_only, wait).await.is_some(), "an HTTP/2 connection without a request is closed");
    let mut slow = TcpStream::connect(gw.addr).await.unwrap();
    let started = Instant::now();
    let mut closed = false;
    for b in H2_PREFACE.iter().cycle() {
        if slow.write_all(&[*b]).await.is_err() || peer_closed(&mut slow).await {
            closed = true;
            break;
        }
        assert!(started.elapsed() < wait, "a preface sent a byte at a time is cut off at the header timeout");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(closed);
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn idle_http1_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let upstream = Upstream::start().await;
    // First the idle timeout is the shorter: closing then is this gateway's doing, not hyper's
    // head timer. Then the head timeout is: the next request head is due within it (README).
    for (header_timeout, idle_timeout) in ["30s", "1s"].into_iter().zip(["1s", "60s"]) {
        let limits = format!("[limits]\nheader_timeout = {header_timeout:?}\nidle_timeout = {idle_timeout:?}\n");
        let gw = Gateway::start(config_without_policy(&upstream.url(), &limits)).await;
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(b"GET /.well-known/oauth-protected-resource HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let answer = closed_within(&mut s, Duration::from_secs(1) + Duration::from_secs(5)).await;
        let answer = String::from_utf8_lossy(&answer.unwrap_or_else(|| panic!("{limits}: the idle keep-alive connection is closed"))).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        gw.shutdown().await;
    }
}

/// An HTTP/2 (prior knowledge) connection: the request sender and the connection task, which
/// ends when the gateway closes the connection.
async fn h2_connection(addr: SocketAddr) -> (hyper::client::conn::http2::SendRequest<http_body_util::Empty<Bytes>>, tokio::task::JoinHandle<()>) {
    let io = hyper_util::rt::TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (sender, conn) = hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await.unwrap();
    (
        sender,
        tokio::spawn(async move {
            let _ = conn.await;
        }),
    )
}

#[tokio::test]
async fn idle_http2_connection_is_closed_after_the_idle_timeout() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nidle_timeout = \"1s\"\n")).await;
    let (mut sender, conn) = h2_connection(gw.addr).await;
    let req = http::Request::get(format!("http://{}/.well-known/oauth-protected-resource", gw.addr)).body(http_body_util::Empty::new()).unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    drop(resp);
    // The client keeps its end open (and answers pings); only the gateway can end it.
    tokio::time::timeout(Duration::from_secs(1) + Duration::from_secs(5), conn).await.expect("the idle HTTP/2 connection is closed").unwrap();
    assert!(sender.is_closed());
    gw.shutdown().await;
}

#[tokio::test]
async fn a_streaming_response_keeps_its_connection_past_the_idle_timeout() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nidle_timeout = \"500ms\"\n")).await;
    let mut sse = client().get(gw.url("/sse")).send().await.unwrap();
    let first = sse.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event 1"));
    // Several idle timeouts pass while the response streams: a request is in flight.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    upstream.release();
    let second = tokio::time::timeout(HANG, sse.chunk()).await.unwrap().unwrap().expect("the stream is still open");
    assert!(String::from_utf8_lossy(&second).contains("event 2"));
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// JSON-RPC batches
// ---------------------------------------------------------------------------------------------

fn batch(n: usize, element: impl Fn(usize) -> serde_json::Value) -> String {
    serde_json::Value::Array((0..n).map(element).collect()).to_string()
}

#[tokio::test]
async fn batch_over_max_batch_is_400_before_policy_and_not_forwarded() {
    let upstream = Upstream::start().await;
    // The policy refuses `forbidden/*`: a 403 would mean it ran on the oversized batch.
    let p = common::policy::PolicyDir::new(&common::policy::rego(
        "default allow := true\nallow := false if startswith(input.mcp.method, \"forbidden/\")\ndecision := {\"allow\": allow}",
    ));
    let gw = Gateway::start(config(&upstream.url(), &p.toml())).await;
    let body = batch(101, |i| serde_json::json!({"jsonrpc": "2.0", "method": "forbidden/notify", "params": {"i": i}}));
    let resp = client().post(gw.url("/mcp")).header("content-type", "application/json").body(body).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], serde_json::Value::Null);
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["message"], "Invalid Request");
    assert_eq!(body["error"]["data"]["error"], "batch_too_large");
    assert_eq!(body["error"]["data"]["reason"], "batch of 101 messages exceeds limits.max_batch = 100");
    assert!(upstream.seen().is_empty());
    // At the bound, the batch is decided element by element as before.
    let allowed = batch(100, |i| serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"i": i}}));
    let resp = client().post(gw.url("/mcp")).header("content-type", "application/json").body(allowed).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let refused = batch(100, |i| serde_json::json!({"jsonrpc": "2.0", "method": if i == 99 { "forbidden/x" } else { "ping" }, "id": i}));
    let resp = client().post(gw.url("/mcp")).header("content-type", "application/json").body(refused).send().await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_eq!(upstream.seen().len(), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn max_batch_is_configurable() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config(&upstream.url(), "[limits]\nmax_batch = 2\n")).await;
    let body = batch(3, |i| serde_json::json!({"jsonrpc": "2.0", "method": "ping", "id": i}));
    let resp = client().post(gw.url("/mcp")).body(body).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["data"]["reason"], "batch of 3 messages exceeds limits.max_batch = 2");
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

/// A gateway on its own multi-threaded runtime with two workers, as `portcullis run` has on a
/// two-core machine, so CPU the gateway spends cannot delay the test's own client.
struct OwnRuntime {
    addr: SocketAddr,
    admin: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OwnRuntime {
    fn start(config: portcullis::config::Config) -> OwnRuntime {
        common::trace_init();
        let (addrs_tx, addrs_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let running = portcullis::server::start(config).await.unwrap();
                addrs_tx.send((running.addr, running.admin_addr.unwrap())).unwrap();
                let _ = stop_rx.await;
                running.shutdown().await;
            });
        });
        let (addr, admin) = addrs_rx.recv().unwrap();
        OwnRuntime { addr, admin, stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers `url` within 2 s (a hang detector, not a speed check).
async fn answers_promptly(url: &str) {
    let resp = tokio::time::timeout(Duration::from_secs(2), client().get(url).send()).await;
    let resp = resp.unwrap_or_else(|_| panic!("{url} did not answer within 2 s while batches were evaluated")).unwrap();
    assert_eq!(resp.status(), 200, "{url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metadata_answer_while_large_batches_are_evaluated() {
    let upstream = Upstream::start().await;
    // A policy that compares every argument with every other: milliseconds per message (far
    // below the 250 ms evaluation limit even when the whole suite shares two cores), as an
    // operator's policy inspecting arguments may well take on hostile ones. 100 such messages
    // hold a core for a second or more: the per-request budget is raised so they are decided
    // (bounds.rs shows a budget stopping such a batch).
    let p = common::policy::PolicyDir::new(&common::policy::rego(
        r#"dupes := count([1 | some a in input.mcp.arguments.items; some b in input.mcp.arguments.items; a == b])
decision := {"allow": dupes >= 0}"#,
    ));
    let gw = OwnRuntime::start(config(&upstream.url(), &format!("{}\n[limits]\npolicy_budget = \"60s\"\n", p.toml())));
    let items: Vec<String> = (0..100).map(|i| format!("item-{i:04}")).collect();
    let body =
        batch(100, |i| serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "search", "arguments": {"items": items}}}));
    let mut load = JoinSet::new();
    // More batches than the gateway has workers (or cores): each takes seconds of CPU.
    for _ in 0..6 {
        let (url, body) = (format!("http://{}/mcp", gw.addr), body.clone());
        load.spawn(async move { client().post(url).header("content-type", "application/json").body(body).send().await.unwrap().status() });
    }
    // Probe while the batches are being decided.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut probed = 0;
    while !load.is_empty() && probed < 5 {
        answers_promptly(&format!("http://{}/healthz", gw.admin)).await;
        answers_promptly(&format!("http://{}/.well-known/oauth-protected-resource", gw.addr)).await;
        probed += 1;
        if let Some(done) = tokio::time::timeout(Duration::from_millis(100), load.join_next()).await.ok().flatten() {
            assert_eq!(done.unwrap(), 200);
        }
    }
    while let Some(done) = tokio::time::timeout(Duration::from_secs(120), load.join_next()).await.expect("the batches are decided") {
        assert_eq!(done.unwrap(), 200, "the batches themselves are allowed");
    }
    assert_eq!(upstream.seen().len(), 6);
}

// ---------------------------------------------------------------------------------------------
// Body bytes in flight
// ---------------------------------------------------------------------------------------------

async fn in_flight_requests(gw: &Gateway) -> u64 {
    let text = common::metrics(gw).await;
    text.lines().find(|l| l.contains("in_flight_requests") && !l.starts_with('#')).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn stalled_uploads_exhaust_the_body_budget_then_requests_go_through_again() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nmax_body = \"64KiB\"\nmax_body_in_flight = \"128KiB\"\nbody_timeout = \"2s\"\n"))
        .await;
    // Two uploads send most of the largest body, one with Content-Length, one chunked, and
    // stall: together they hold 126 KiB of the 128 KiB budget.
    let part = vec![b'a'; 63 << 10];
    let mut declared = TcpStream::connect(gw.addr).await.unwrap();
    declared.write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n").await.unwrap();
    declared.write_all(&part).await.unwrap();
    let mut chunked = TcpStream::connect(gw.addr).await.unwrap();
    chunked.write_all(format!("POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n", part.len()).as_bytes()).await.unwrap();
    chunked.write_all(&part).await.unwrap();
    chunked.write_all(b"\r\n").await.unwrap();
    let started = Instant::now();
    while in_flight_requests(&gw).await < 2 {
        assert!(started.elapsed() < HANG, "the stalled uploads reach the gateway");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let resp = client().post(gw.url("/mcp")).body(vec![b'b'; 4 << 10]).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "overloaded");
    assert!(body["reason"].as_str().unwrap().contains("limits.max_body_in_flight"), "{body}");
    assert!(upstream.seen().is_empty(), "the refused body was not forwarded");
    // What still fits goes through; a request without a body holds nothing.
    assert_eq!(client().post(gw.url("/mcp")).body(vec![b'c'; 1 << 10]).send().await.unwrap().status(), 200);
    assert_eq!(client().get(gw.url("/mcp")).send().await.unwrap().status(), 200);

    // The stalled uploads time out (408) and give their share back.
    for s in [&mut declared, &mut chunked] {
        let answer = closed_within(s, HANG).await.expect("the stalled upload is answered");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    let resp = client().post(gw.url("/mcp")).body(vec![b'd'; 64 << 10]).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(upstream.seen().last().unwrap().body.len(), 64 << 10);
    assert_eq!(upstream.seen().len(), 3);
    gw.shutdown().await;
}
