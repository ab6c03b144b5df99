//! Bad input gets a precise refusal and the gateway keeps serving: bodies over the limit
//! (declared or chunked), huge headers, too many headers, slow bodies.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::time::Duration;

use common::{client, config_without_policy, raw_exchange, Gateway, Upstream};

const SMALL_LIMITS: &str = "[limits]\nmax_body = \"1KiB\"\nmax_header_bytes = \"16KiB\"\nmax_headers = 32\nbody_timeout = \"500ms\"\n";

async fn still_serving(gw: &Gateway) {
    let resp = client().post(gw.url("/mcp")).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 200, "gateway keeps serving after bad input");
}

#[tokio::test]
async fn declared_body_over_limit_is_413_and_not_forwarded() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), SMALL_LIMITS)).await;
    let resp = client().post(gw.url("/mcp")).body(vec![b'a'; 1025]).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "body_too_large");
    assert!(body["reason"].as_str().unwrap().contains("1024"), "{body}");
    assert!(upstream.seen().is_empty());
    // Exactly at the limit is fine.
    let resp = client().post(gw.url("/mcp")).body(vec![b'a'; 1024]).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(upstream.seen()[0].body.len(), 1024);
    gw.shutdown().await;
}

#[tokio::test]
async fn chunked_body_over_limit_is_413() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), SMALL_LIMITS)).await;
    let chunk = "a".repeat(600);
    let req = format!("POST /mcp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n{chunk}\r\n258\r\n{chunk}\r\n0\r\n\r\n");
    let answer = raw_exchange(gw.addr, req.as_bytes(), Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("body_too_large"), "{answer}");
    assert!(upstream.seen().is_empty());
    still_serving(&gw).await;
    gw.shutdown().await;
}

#[tokio::test]
async fn monitor_mode_still_refuses_bodies_it_cannot_hold() {
    let upstream = Upstream::start().await;
    let mut cfg = config_without_policy(&upstream.url(), SMALL_LIMITS);
    cfg.mode = portcullis::config::Mode::Monitor.into();
    let gw = Gateway::start(cfg).await;
    let resp = client().post(gw.url("/mcp")).body(vec![b'a'; 4096]).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    assert!(upstream.seen().is_empty());
    gw.shutdown().await;
}

#[tokio::test]
async fn huge_header_is_431_and_gateway_keeps_serving() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), SMALL_LIMITS)).await;
    let req = format!("GET /mcp HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(64 * 1024));
    let answer = raw_exchange(gw.addr, req.as_bytes(), Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.200}");
    assert!(upstream.seen().is_empty());
    still_serving(&gw).await;
    gw.shutdown().await;
}

#[tokio::test]
async fn too_many_headers_are_refused() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), SMALL_LIMITS)).await;
    let headers: String = (0..40).map(|i| format!("X-H{i}: v\r\n")).collect();
    let req = format!("GET /mcp HTTP/1.1\r\nHost: x\r\n{headers}\r\n");
    let answer = raw_exchange(gw.addr, req.as_bytes(), Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.200}");
    assert!(upstream.seen().is_empty());
    still_serving(&gw).await;
    gw.shutdown().await;
}

#[tokio::test]
async fn slow_body_is_408_after_the_body_timeout() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), SMALL_LIMITS)).await;
    // Declares 100 bytes, sends 5, then stalls.
    let answer = raw_exchange(gw.addr, b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhello", Duration::from_secs(3)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    assert!(upstream.seen().is_empty());
    still_serving(&gw).await;
    gw.shutdown().await;
}

#[tokio::test]
async fn garbage_request_line_gets_400_and_gateway_keeps_serving() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), SMALL_LIMITS)).await;
    let answer = raw_exchange(gw.addr, b"\x16\x03\x01 not http at all\r\n\r\n", Duration::from_secs(2)).await;
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(upstream.seen().is_empty());
    still_serving(&gw).await;
    gw.shutdown().await;
}
