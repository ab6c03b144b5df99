//! Forwarding: path and query kept, hop-by-hop and client-set identity headers removed,
//! X-Forwarded-* set, MCP session headers kept both ways, SSE streamed event by event,
//! upstream failures answered with 502/504 and a JSON body.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::time::Duration;

use common::{client, config_without_policy, Gateway, Upstream};

#[tokio::test]
async fn post_is_forwarded_with_path_query_and_clean_headers() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "")).await;
    let session = common::initialize(&gw).await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let resp = client()
        .post(gw.url("/mcp?tenant=a%20b&x=1"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("authorization", "Bearer not-for-upstream")
        .header("x-portcullis-agent", "https://spoofed.example")
        .header("x-portcullis-subject", "admin")
        .header("connection", "x-hop")
        .header("x-hop", "1")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-host", "evil.example")
        .header("forwarded", "for=198.51.100.1")
        .header("x-real-ip", "198.51.100.2")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["mcp-session-id"], session.as_str(), "session id passes back to the client");
    assert!(resp.headers().get("x-upstream-private").is_none(), "fields the upstream's Connection names are removed");
    assert!(resp.headers().get("x-request-id").is_some());

    let seen = upstream.seen();
    assert_eq!(seen.len(), 2, "initialize, then the request");
    let s = &seen[1];
    assert_eq!(s.method, "POST");
    assert_eq!(s.path_and_query, "/mcp?tenant=a%20b&x=1");
    assert_eq!(s.body, body.as_bytes(), "body forwarded byte for byte");
    assert_eq!(s.headers["mcp-session-id"], session.as_str());
    assert_eq!(s.headers["mcp-protocol-version"], "2025-11-25");
    assert_eq!(s.headers["accept"], "application/json, text/event-stream");
    assert!(s.headers.get("authorization").is_none(), "no token passthrough by default");
    assert!(s.headers.get("x-portcullis-agent").is_none() && s.headers.get("x-portcullis-subject").is_none(), "client-set identity headers are stripped");
    assert!(s.headers.get("x-hop").is_none() && s.headers.get("connection").is_none(), "hop-by-hop headers are stripped");
    assert_eq!(s.headers["x-forwarded-for"], "127.0.0.1", "client-supplied forwarding claims are replaced by what the gateway saw");
    assert_eq!(s.headers.get_all("forwarded").iter().count(), 1, "the client's Forwarded is replaced, not appended to");
    assert_eq!(s.headers["forwarded"], format!("for=127.0.0.1;host=\"127.0.0.1:{}\";proto=http", gw.addr.port()));
    assert!(s.headers.get("x-real-ip").is_none());
    assert_eq!(s.headers["x-forwarded-proto"], "http");
    assert_eq!(s.headers["x-forwarded-host"], format!("127.0.0.1:{}", gw.addr.port()));
    assert_eq!(s.headers["host"], upstream.addr.to_string(), "Host names the upstream");
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_base_path_is_prefixed() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&format!("{}/backend/", upstream.url()), "")).await;
    let resp = client().get(gw.url("/mcp?a=1")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(upstream.seen()[0].path_and_query, "/backend/mcp?a=1");
    gw.shutdown().await;
}

#[tokio::test]
async fn get_stream_and_delete_session_pass_through() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "")).await;
    let session = common::initialize(&gw).await;
    let get = client()
        .get(gw.url("/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("last-event-id", "7")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 200);
    let del = client().delete(gw.url("/mcp")).header("mcp-session-id", &session).send().await.unwrap();
    assert_eq!(del.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.iter().map(|s| s.method.as_str()).collect::<Vec<_>>(), ["POST", "GET", "DELETE"]);
    assert_eq!(seen[1].headers["last-event-id"], "7");
    assert_eq!(seen[2].headers["mcp-session-id"], session.as_str());
    gw.shutdown().await;
}

#[tokio::test]
async fn sse_reaches_the_client_event_by_event() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "")).await;
    let mut resp = client().get(gw.url("/sse")).header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    // The upstream holds event 2 back until released: event 1 must arrive on its own.
    let first = tokio::time::timeout(Duration::from_secs(5), resp.chunk()).await.expect("event 1 arrives before the stream ends").unwrap().unwrap();
    assert_eq!(&first[..], b"id: 1\ndata: event 1\n\n");
    upstream.release();
    let second = tokio::time::timeout(Duration::from_secs(5), resp.chunk()).await.expect("event 2 arrives").unwrap().unwrap();
    assert_eq!(&second[..], b"id: 2\ndata: event 2\n\n");
    assert!(resp.chunk().await.unwrap().is_none(), "stream ends after the upstream ends it");
    gw.shutdown().await;
}

#[tokio::test]
async fn unreachable_upstream_is_502_with_a_json_reason() {
    let closed = common::closed_port().await;
    let gw = Gateway::start(config_without_policy(&format!("http://{closed}"), "")).await;
    let resp = client().post(gw.url("/mcp")).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 502);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let rid = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "upstream_unavailable");
    assert_eq!(body["request_id"], rid);
    assert_eq!(body["reason"], "the MCP server could not be reached", "no internal error chain in the body");
    assert!(common::metrics(&gw).await.contains(r#"portcullis_upstream_errors_total{error="upstream_unavailable"} 1"#));
    gw.shutdown().await;
}

#[tokio::test]
async fn slow_upstream_is_504_after_the_response_timeout() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "")).await; // response_timeout = 1s
    let started = std::time::Instant::now();
    let resp = client().get(gw.url("/slow")).send().await.unwrap();
    assert_eq!(resp.status(), 504);
    assert!(started.elapsed() < Duration::from_secs(4), "timed out at the configured bound, not the upstream's 5 s");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "upstream_timeout");
    gw.shutdown().await;
}

#[tokio::test]
async fn http2_prior_knowledge_clients_are_forwarded_to_an_http1_upstream() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "")).await;
    let h2 = reqwest::Client::builder().http2_prior_knowledge().no_proxy().build().unwrap();
    let init = h2.post(gw.url("/mcp")).body(common::INITIALIZE).send().await.unwrap();
    assert_eq!((init.version(), init.status().as_u16()), (reqwest::Version::HTTP_2, 200));
    let session = init.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let resp = h2.post(gw.url("/mcp")).header("cookie", "a=1").header("mcp-session-id", &session).body("{}").send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["mcp-session-id"], session.as_str());
    let seen = upstream.seen();
    assert_eq!(seen[1].headers["x-forwarded-host"], format!("127.0.0.1:{}", gw.addr.port()), ":authority becomes X-Forwarded-Host");
    assert_eq!(seen[1].headers["mcp-session-id"], session.as_str());
    assert!(seen[1].headers.get("te").is_none());
    gw.shutdown().await;
}

#[tokio::test]
async fn head_keeps_the_upstream_length_and_sends_no_body() {
    let upstream = Upstream::start().await;
    let gw = Gateway::start(config_without_policy(&upstream.url(), "")).await;
    let resp = client().head(gw.url("/mcp")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("content-length").is_some());
    assert!(resp.bytes().await.unwrap().is_empty());
    assert_eq!(upstream.seen()[0].method, "HEAD");
    gw.shutdown().await;
}

/// A backend that numbers its connections (`x-conn` on every answer, from 1) and closes each
/// one `lifetime` after accepting it, as a backend's keep-alive timeout does. `/sse` sends
/// one chunk and then nothing until its connection closes.
async fn numbering_backend(lifetime: Duration) -> std::net::SocketAddr {
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for n in 1u32.. {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| async move {
                    let body = if req.uri().path() == "/sse" {
                        let first = futures_util::stream::once(async { Ok::<_, std::convert::Infallible>(Frame::data(bytes::Bytes::from_static(b"first"))) });
                        BodyExt::boxed(StreamBody::new(futures_util::StreamExt::chain(first, futures_util::stream::pending())))
                    } else {
                        portcullis_test_support::full(format!("answer on connection {n}"))
                    };
                    Ok::<_, std::convert::Infallible>(http::Response::builder().header("x-conn", n).body(body).unwrap())
                });
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                let _ = tokio::time::timeout(lifetime, conn).await;
            });
        }
    });
    addr
}

async fn answered_on(gw: &Gateway, path: &str) -> String {
    let resp = client().get(gw.url(path)).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    let conn = resp.headers()["x-conn"].to_str().unwrap().to_owned();
    assert_eq!(resp.text().await.unwrap(), format!("answer on connection {conn}"), "each answer is its own request's");
    conn
}

#[tokio::test]
async fn backend_connections_are_kept_alive_and_replaced_when_the_backend_closes_them() {
    let backend = numbering_backend(Duration::from_millis(600)).await;
    let gw = Gateway::start(config_without_policy(&format!("http://{backend}"), "")).await;
    for _ in 0..3 {
        assert_eq!(answered_on(&gw, "/mcp").await, "1", "one connection for requests one after the other");
    }
    // The backend has closed connection 1: the next request goes on a new one, not a 502.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(answered_on(&gw, "/mcp").await, "2");
    assert_eq!(answered_on(&gw, "/mcp").await, "2");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_connection_idle_past_pool_idle_timeout_is_not_reused() {
    let backend = numbering_backend(Duration::from_secs(30)).await;
    let mut config = config_without_policy(&format!("http://{backend}"), "");
    config.upstream.pool_idle_timeout = Duration::from_millis(300);
    let gw = Gateway::start(config).await;
    assert_eq!(answered_on(&gw, "/mcp").await, "1");
    assert_eq!(answered_on(&gw, "/mcp").await, "1");
    // Still open at the backend, but idle longer than the gateway keeps one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(answered_on(&gw, "/mcp").await, "2");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_response_left_unfinished_takes_its_backend_connection_with_it() {
    let backend = numbering_backend(Duration::from_secs(30)).await;
    let gw = Gateway::start(config_without_policy(&format!("http://{backend}"), "")).await;
    let mut streaming = client().get(gw.url("/sse")).send().await.unwrap();
    assert_eq!(streaming.headers()["x-conn"], "1");
    assert_eq!(&streaming.chunk().await.unwrap().unwrap()[..], b"first");
    drop(streaming);
    // Connection 1 still owes the rest of /sse: reusing it would hand this request that
    // answer, or none. It goes on a new connection.
    assert_eq!(answered_on(&gw, "/mcp").await, "2");
    gw.shutdown().await;
}
