//! Resource exhaustion by unauthenticated clients: connection slots held by sockets that never
//! finish a request. The gateway keeps answering everyone else. Deadlines in these tests only detect
//! hangs; nothing here measures speed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{client, config_without_policy, Gateway, Upstream};
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
    // The head timeout is longer than the idle timeout, so closing at the idle timeout is this
    // gateway's doing, not hyper's head timer.
    let gw = Gateway::start(config_without_policy(&upstream.url(), "[limits]\nheader_timeout = \"30s\"\nidle_timeout = \"1s\"\n")).await;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /.well-known/oauth-protected-resource HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let answer = closed_within(&mut s, Duration::from_secs(1) + Duration::from_secs(5)).await.expect("the idle keep-alive connection is closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    gw.shutdown().await;
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
