//! Admission control: `limits.max_in_flight` (requests handled at once, over all connections),
//! load shedding (503 `overloaded` at once, never a queue) and `limits.request_timeout` (until
//! the response head, never the streamed body). Real floods on 127.0.0.1 against the test
//! upstream's slow path. Deadlines here only detect hangs; nothing measures speed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test
use crate::common;

use std::time::{Duration, Instant};

use common::{client, Gateway, Upstream};
use portcullis::config::Config;
use tokio::task::JoinSet;

/// How long a test waits before calling the gateway hung: far above every delay used here.
const HANG: Duration = Duration::from_secs(30);

/// A gateway config with every stage off (the bodies and paths need not be MCP), the upstream
/// given `response_timeout` (the harness's 1 s would end slow requests before the limits under
/// test), and `limits` as the `[limits]` section.
fn config(upstream: &Upstream, response_timeout: &str, limits: &str, log: &std::path::Path) -> Config {
    let template = common::config_toml(
        &upstream.url(),
        &format!("[limits]\n{limits}\n[signatures]\nrequired = false\n[oauth]\nrequired = false\n[policy]\nenabled = false\n"),
    );
    let text = common::TomlEdit::of(&template).set("upstream.response_timeout", response_timeout).set("log.decisions", log.display().to_string()).text();
    Config::parse(&text, "test config", std::path::Path::new(".")).unwrap()
}

/// A value of the gateway's Prometheus text: the first sample line containing every part.
async fn metric(gw: &Gateway, parts: &[&str]) -> u64 {
    let text = common::metrics(gw).await;
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| parts.iter().all(|p| l.contains(p)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

async fn in_flight(gw: &Gateway) -> u64 {
    metric(gw, &["portcullis_in_flight_requests"]).await
}

async fn shed_count(gw: &Gateway) -> u64 {
    metric(gw, &["portcullis_requests_total", "error=\"overloaded\""]).await
}

/// Waits until the gateway handles `n` requests (a hang detector).
async fn until_in_flight(gw: &Gateway, n: u64) {
    let started = Instant::now();
    while in_flight(gw).await != n {
        assert!(started.elapsed() < HANG, "{n} requests never were in flight");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The process's resident set (the gateway runs in this test process), in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn over_max_in_flight_a_request_is_shed_at_once_logged_and_counted_but_metadata_is_served() {
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.log");
    let gw = Gateway::start(config(&upstream, "30s", "max_in_flight = 1", &log)).await;
    // One slow request takes the only slot.
    let holder = tokio::spawn(client().get(gw.url("/delay?ms=4000")).send());
    until_in_flight(&gw, 1).await;

    let resp = tokio::time::timeout(HANG, client().post(gw.url("/mcp")).body("{}").send()).await.expect("shed at once, not queued").unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "overloaded");
    assert!(body["reason"].as_str().unwrap().contains("limits.max_in_flight"), "{body}");
    assert_eq!(body["request_id"], request_id.as_str());
    // HTTP/2 too: a stream over the limit is shed like an HTTP/1.1 request.
    let h2 = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap();
    assert_eq!(h2.get(gw.url("/mcp")).send().await.unwrap().status(), 503);

    // What is not behind the limit still answers: the RFC 9728 document and the admin listener.
    let prm = client().get(gw.url("/.well-known/oauth-protected-resource")).send().await.unwrap();
    assert_eq!(prm.status(), 200, "the metadata document is not shed");
    assert_eq!(client().get(gw.admin_url("/healthz")).send().await.unwrap().status(), 200);
    assert_eq!(client().get(gw.admin_url("/readyz")).send().await.unwrap().status(), 200);
    assert_eq!(shed_count(&gw).await, 2, "both shed requests are counted");
    assert_eq!(upstream.seen().len(), 1, "a shed request is never forwarded");

    // Once the slot is free, requests go through again.
    let held = tokio::time::timeout(HANG, holder).await.unwrap().unwrap().unwrap();
    assert_eq!(held.status(), 200, "the admitted request was not disturbed");
    assert_eq!(client().post(gw.url("/mcp")).body("{}").send().await.unwrap().status(), 200);
    gw.shutdown().await;

    // One decision-log line per shed request, like every refusal.
    let lines = common::decision_lines(&log);
    let shed: Vec<_> = lines.iter().filter(|l| l["error"] == "overloaded").collect();
    assert_eq!(shed.len(), 2, "{lines:?}");
    let first = shed.iter().find(|l| l["request_id"] == request_id.as_str()).expect("the line carries the refusal's request_id");
    assert_eq!((first["outcome"].as_str(), first["status"].as_u64()), (Some("deny"), Some(503)));
    assert_eq!((first["method"].as_str(), first["path"].as_str()), (Some("POST"), Some("/mcp")));
    assert!(first["reason"].as_str().unwrap().contains("limits.max_in_flight"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_shed_without_hanging_health_answers_throughout_and_memory_stays_bounded() {
    const LIMIT: u64 = 4;
    const WORKERS: usize = 200;
    const PER_WORKER: usize = 10;
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.log");
    let gw = Gateway::start(config(&upstream, "30s", &format!("max_in_flight = {LIMIT}"), &log)).await;
    let http = client();

    // 200 clients, each sending 10 requests to the slow path back to back: 2,000 requests.
    let flood = |http: reqwest::Client, url: String| async move {
        let mut tasks = JoinSet::new();
        for _ in 0..WORKERS {
            let (http, url) = (http.clone(), url.clone());
            tasks.spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..PER_WORKER {
                    let resp = tokio::time::timeout(HANG, http.get(&url).send()).await.expect("a request hung").unwrap();
                    let status = resp.status().as_u16();
                    if status == 503 {
                        assert_eq!(resp.headers()["retry-after"], "1");
                        let body: serde_json::Value = resp.json().await.unwrap();
                        assert_eq!(body["error"], "overloaded", "{body}");
                    } else {
                        assert_eq!(resp.text().await.unwrap(), "done after delay");
                    }
                    statuses.push(status);
                }
                statuses
            });
        }
        let mut all = Vec::new();
        while let Some(done) = tasks.join_next().await {
            all.extend(done.unwrap());
        }
        all
    };
    let url = gw.url("/delay?ms=50");
    // A first flood warms up what a process allocates once (connection pools, worker stacks,
    // metric families) so the second one measures what flooding costs.
    let warm_up = flood(http.clone(), url.clone()).await;
    let before = rss_kib();

    let probing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let probes = {
        let (probing, healthz, gw_admin) = (probing.clone(), gw.admin_url("/healthz"), gw.admin_url("/metrics"));
        tokio::spawn(async move {
            let (mut answered, mut peak_rss, mut peak_in_flight) = (0, 0, 0);
            while probing.load(std::sync::atomic::Ordering::SeqCst) {
                let health = tokio::time::timeout(Duration::from_secs(5), client().get(&healthz).send()).await.expect("/healthz answers during the flood");
                assert_eq!(health.unwrap().status(), 200);
                answered += 1;
                let metrics = client().get(&gw_admin).send().await.unwrap().text().await.unwrap();
                let now =
                    metrics.lines().find(|l| l.starts_with("portcullis_admitted_requests")).and_then(|l| l.rsplit(' ').next()).unwrap().parse::<u64>().unwrap();
                peak_in_flight = peak_in_flight.max(now);
                peak_rss = peak_rss.max(rss_kib());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (answered, peak_rss, peak_in_flight)
        })
    };
    let statuses = tokio::time::timeout(Duration::from_secs(300), flood(http.clone(), url.clone())).await.expect("the flood ends");
    probing.store(false, std::sync::atomic::Ordering::SeqCst);
    let (answered, peak_rss, peak_in_flight) = probes.await.unwrap();
    let after = rss_kib();

    let ok = statuses.iter().filter(|s| **s == 200).count();
    let shed = statuses.iter().filter(|s| **s == 503).count();
    assert_eq!(ok + shed, WORKERS * PER_WORKER, "every request is answered 200 or 503");
    assert!(shed > 0 && ok > 0, "some are shed, some are served: {ok} ok, {shed} shed");
    assert!(answered > 0, "/healthz was probed during the flood");
    assert!(peak_in_flight <= LIMIT, "at most max_in_flight requests are handled at once: saw {peak_in_flight}");
    // Measured alone: the second flood grows the process by 1–4 MiB (docs/request-path.md,
    // "Admission control"); the bound is generous because the suite's other tests share the process.
    let growth = peak_rss.max(after).saturating_sub(before);
    eprintln!("flood: {ok} ok, {shed} shed; VmRSS before {before} KiB, peak {peak_rss} KiB, after {after} KiB");
    assert!(growth < 128 << 10, "a flood of 2,000 requests grew the process by {growth} KiB");

    // After the flood, every request goes through again.
    for _ in 0..LIMIT {
        assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
    }
    let served = warm_up.iter().chain(&statuses).filter(|s| **s == 200).count() + LIMIT as usize;
    assert_eq!(upstream.seen().len(), served, "only admitted requests are forwarded");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_request_not_answered_within_request_timeout_gets_504_and_frees_its_slot() {
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.log");
    let gw = Gateway::start(config(&upstream, "30s", "max_in_flight = 1\nrequest_timeout = \"1s\"", &log)).await;
    let resp = tokio::time::timeout(HANG, client().get(gw.url("/delay?ms=20000")).send()).await.expect("the request timeout ends it").unwrap();
    assert_eq!(resp.status(), 504);
    assert!(resp.headers().get("retry-after").is_none(), "the request may have been forwarded: no retry is suggested");
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "request_timeout");
    assert!(body["reason"].as_str().unwrap().contains("limits.request_timeout"), "{body}");
    assert_eq!(body["request_id"], request_id.as_str());
    // The only slot was given back: the next request is served, not shed.
    let next = client().get(gw.url("/delay?ms=1")).send().await.unwrap();
    assert_eq!(next.status(), 200);
    assert_eq!(in_flight(&gw).await, 0, "the timed-out handler was stopped");
    gw.shutdown().await;
    let lines = common::decision_lines(&log);
    let line = lines.iter().find(|l| l["request_id"] == request_id.as_str()).expect("a decision-log line for the timed-out request");
    assert_eq!((line["outcome"].as_str(), line["status"].as_u64(), line["error"].as_str()), (Some("deny"), Some(504), Some("request_timeout")));
}

#[tokio::test]
async fn request_timeout_does_not_cut_a_streaming_response_which_holds_no_slot() {
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.log");
    let gw = Gateway::start(config(&upstream, "30s", "max_in_flight = 1\nrequest_timeout = \"500ms\"", &log)).await;
    let mut sse = client().get(gw.url("/sse")).send().await.unwrap();
    assert_eq!(sse.status(), 200);
    let first = tokio::time::timeout(HANG, sse.chunk()).await.unwrap().unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event 1"));
    // The stream is open past several request timeouts, and does not take the only slot.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(client().post(gw.url("/mcp")).body("{}").send().await.unwrap().status(), 200, "a stream holds no slot");
    upstream.release();
    let second = tokio::time::timeout(HANG, sse.chunk()).await.unwrap().unwrap().expect("the stream is still open");
    assert!(String::from_utf8_lossy(&second).contains("event 2"));
    gw.shutdown().await;
}

#[tokio::test]
async fn stalled_uploads_do_not_hold_in_flight_slots() {
    use tokio::io::AsyncWriteExt;
    let upstream = Upstream::start().await;
    let (_dir, log) = common::temp_path("decisions.log");
    let gw = Gateway::start(config(&upstream, "30s", "max_in_flight = 2\nbody_timeout = \"20s\"", &log)).await;
    // More stalled uploads than slots: each sends its head and a little of a 64 KiB body.
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let head = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{{\"a\":", gw.addr);
        s.write_all(head.as_bytes()).await.unwrap();
        stalled.push(s);
    }
    until_in_flight(&gw, 6).await;
    // A whole request still gets a slot: the uploads hold body budget, not admission.
    for _ in 0..3 {
        let resp = tokio::time::timeout(HANG, client().post(gw.url("/mcp")).body("{}").send()).await.expect("answered").unwrap();
        assert_eq!(resp.status(), 200, "not shed behind stalled uploads");
    }
    assert_eq!(shed_count(&gw).await, 0);
    drop(stalled);
    gw.shutdown().await;
}
